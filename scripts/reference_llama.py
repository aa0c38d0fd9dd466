#!/usr/bin/python3
"""Independent float64 reference for lct's Llama model math (PyTorch autograd).

Reads an lct parameter file and a packed batch file (both HDF5), computes the
mean next-token cross-entropy loss and the gradient of every parameter, and
either writes them in the layout of `lct eval --grads-out` or compares them
against such a file.

Usage:
  reference_llama.py --checkpoint CKPT.h5 --batch-file B.h5
                     [--grads-out OUT.h5] [--compare LCT_GRADS.h5 [--rtol 1e-5]]
  reference_llama.py --compare A.h5 --reference-grads B.h5 [--rtol 1e-5]
  reference_llama.py --make-batch B.h5 --vocab-size V --lengths 7,1,33 --seed 3
  reference_llama.py --make-checkpoint CKPT.h5 --vocab-size 61 --hidden-size 32
                     --intermediate-size 48 --layers 2 --heads 4 --kv-heads 2
                     [--rope-theta 10000] [--rms-norm-eps 1e-5]
                     [--tie-word-embeddings] [--attention-kernel dca --dca-chunk-size C
                     --dca-local-size W [--dca-mscale M] [--dca-mscale-original-length N]]
                     [--rope-scaling linear|dynamic|yarn --rope-scaling-factor S
                      --rope-original-length L0]
                     [--logit-scaling logn|logn_beyond --logit-scaling-length L]
                     --seed 1
  reference_llama.py --self-test
  reference_llama.py --jobs FILE   (many of the above in one process: each line of FILE
                     is OUT and the arguments of one run; its output goes to OUT and its
                     exit code to OUT.rc; tests/cli/reference_gradients.sh pays torch's import
                     twice instead of 54 times)

Exit codes: 0 ok, 1 comparison/self-test failure, 2 usage or input error.

Shape letters: T tokens in the batch, V vocab, C hidden, I intermediate,
H query heads, KV key/value heads, hd head dim (C / H), L document length.
"""
import argparse
import math
import os
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.nn.functional as F

DT = torch.float64
INT_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads")
FLOAT_KEYS = ("rope_theta", "rms_norm_eps")
DCA_INT_KEYS = ("dca_chunk_size", "dca_local_size", "dca_mscale_original_length")


class RefError(Exception):
    """Input/usage problem: reported as one line, exit code 2."""


# ----------------------------------------------------------------------------
# Parameter naming / config
# ----------------------------------------------------------------------------

def param_shapes(cfg):
    """Ordered dict: Hugging Face parameter name -> expected shape."""
    V, C, I = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    hd = C // cfg["num_attention_heads"]
    qd, kvd = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (C,)
        shapes[p + "self_attn.q_proj.weight"] = (qd, C)
        shapes[p + "self_attn.k_proj.weight"] = (kvd, C)
        shapes[p + "self_attn.v_proj.weight"] = (kvd, C)
        shapes[p + "self_attn.o_proj.weight"] = (C, qd)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        shapes[p + "mlp.gate_proj.weight"] = (I, C)
        shapes[p + "mlp.up_proj.weight"] = (I, C)
        shapes[p + "mlp.down_proj.weight"] = (C, I)
    shapes["model.norm.weight"] = (C,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def h5name(name):
    """'model.layers.0.mlp.up_proj.weight' -> 'model/layers/0/mlp/up_proj/weight'."""
    return name.replace(".", "/")


def validate_config(cfg):
    for k in INT_KEYS:
        if cfg[k] <= 0:
            raise RefError(f"config: {k} must be positive, got {cfg[k]}")
    C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if C % H:
        raise RefError(f"config: hidden_size {C} not divisible by num_attention_heads {H}")
    if H % KV:
        raise RefError(f"config: num_attention_heads {H} not divisible by num_key_value_heads {KV}")
    if (C // H) % 2:
        raise RefError(f"config: head_dim {C // H} must be even for RoPE")
    if cfg["attention_kernel"] not in ("causal", "dca"):
        raise RefError(f"config: attention_kernel '{cfg['attention_kernel']}' is not supported "
                       "(causal, dca)")
    if cfg.get("rope_scaling", "none") not in ("none", "linear", "dynamic", "yarn"):
        raise RefError(f"config: rope_scaling '{cfg['rope_scaling']}' is not supported")
    if cfg.get("rope_scaling", "none") != "none" and not cfg["rope_scaling_factor"] >= 1:
        raise RefError("config: rope_scaling_factor must be >= 1")
    if cfg["attention_kernel"] == "dca":
        C, w = cfg["dca_chunk_size"], cfg["dca_local_size"]
        if not (C > w >= 0):
            raise RefError(f"config: dca needs dca_chunk_size > dca_local_size >= 0, got {C}, {w}")
    if cfg.get("logit_scaling", "none") not in ("none", "logn", "logn_beyond"):
        raise RefError(f"config: logit_scaling '{cfg['logit_scaling']}' is not supported")
    if cfg.get("logit_scaling", "none") != "none" and not cfg["logit_scaling_length"] >= 2:
        raise RefError("config: logit_scaling_length must be >= 2")


# ----------------------------------------------------------------------------
# HDF5 helpers
# ----------------------------------------------------------------------------

def open_h5(path, what, mode="r"):
    if mode == "r" and not os.path.isfile(path):
        raise RefError(f"{what} file not found: {path}")
    try:
        return h5py.File(path, mode)
    except OSError as e:
        raise RefError(f"cannot open {what} file {path}: {e}")


def read_attr(obj, key, where):
    """Scalar attribute as a Python value; strings are decoded."""
    if key not in obj.attrs:
        raise RefError(f"missing attribute '{key}' on {where}")
    v = obj.attrs[key]
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise RefError(f"attribute '{key}' on {where} is not a scalar (shape {v.shape})")
        v = v.reshape(-1)[0]
    if isinstance(v, (bytes, np.bytes_)):
        v = v.decode("utf-8")
    return v


def read_dataset(f, path, where):
    obj = f.get(path)
    if not isinstance(obj, h5py.Dataset):
        raise RefError(f"missing dataset '/{path}' in {where}")
    return obj[()]


def list_datasets(group):
    """Relative paths of all datasets under an HDF5 group."""
    out = []
    group.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) else None)
    return out


# ----------------------------------------------------------------------------
# Reading / writing files
# ----------------------------------------------------------------------------

def load_checkpoint(path):
    """-> (cfg dict, {name: float64 ndarray})."""
    with open_h5(path, "checkpoint") as f:
        g = f.get("model")
        if not isinstance(g, h5py.Group):
            raise RefError(f"missing group '/model' in checkpoint {path}")
        where = f"/model of {path}"
        cfg = {k: int(read_attr(g, k, where)) for k in INT_KEYS}
        cfg.update({k: float(read_attr(g, k, where)) for k in FLOAT_KEYS})
        tie = read_attr(g, "tie_word_embeddings", where)   # int 0/1 or bool
        if isinstance(tie, str):
            raise RefError(f"attribute 'tie_word_embeddings' on {where} is a string")
        cfg["tie_word_embeddings"] = int(bool(tie))
        cfg["attention_kernel"] = str(read_attr(g, "attention_kernel", where))
        if cfg["attention_kernel"] == "dca":
            for k in DCA_INT_KEYS:
                cfg[k] = int(read_attr(g, k, where))
            cfg["dca_mscale"] = float(read_attr(g, "dca_mscale", where))
        cfg["attention_mask"] = "causal"   # attention.mask and its parameters (optional attributes)
        if "attention_mask" in g.attrs:
            v = g.attrs["attention_mask"]
            cfg["attention_mask"] = v.decode() if isinstance(v, bytes) else str(v)
            for k in ("attention_window", "attention_sink_tokens", "attention_block_size", "attention_top_blocks"):
                cfg[k] = int(read_attr(g, k, where)) if k in g.attrs else 0
        cfg["logit_scaling"] = "none"
        if "logit_scaling" in g.attrs:
            v = g.attrs["logit_scaling"]
            cfg["logit_scaling"] = v.decode() if isinstance(v, bytes) else str(v)
            cfg["logit_scaling_length"] = int(read_attr(g, "logit_scaling_length", where))
        cfg["rope_scaling"] = "none"
        if "rope_scaling" in g.attrs:
            v = g.attrs["rope_scaling"]
            cfg["rope_scaling"] = v.decode() if isinstance(v, bytes) else str(v)
            cfg["rope_scaling_factor"] = float(read_attr(g, "rope_scaling_factor", where))
            cfg["rope_original_length"] = int(read_attr(g, "rope_original_length", where))
        validate_config(cfg)

        shapes = param_shapes(cfg)
        params = {}
        for name, shape in shapes.items():
            a = read_dataset(f, "params/" + h5name(name), f"checkpoint {path}")
            if tuple(a.shape) != shape:
                raise RefError(f"checkpoint {path}: {name} has shape {tuple(a.shape)}, "
                               f"expected {shape}")
            params[name] = np.asarray(a, dtype=np.float64)
        if "params" in f:
            expected = {h5name(n) for n in shapes}
            for extra in sorted(set(list_datasets(f["params"])) - expected):
                print(f"warning: ignoring unexpected checkpoint dataset /params/{extra}",
                      file=sys.stderr)
    return cfg, params


def load_batch(path, vocab_size):
    """-> (tokens int64 ndarray [T], cu_seqlens list of ints [n+1])."""
    with open_h5(path, "batch") as f:
        tokens = np.asarray(read_dataset(f, "tokens", f"batch {path}")).reshape(-1)
        cu = np.asarray(read_dataset(f, "cu_seqlens", f"batch {path}")).reshape(-1)
    if not (np.issubdtype(tokens.dtype, np.integer) and np.issubdtype(cu.dtype, np.integer)):
        raise RefError(f"batch {path}: tokens and cu_seqlens must be integer datasets")
    tokens, cu = tokens.astype(np.int64), [int(c) for c in cu]
    T = len(tokens)
    if len(cu) < 2 or cu[0] != 0 or cu[-1] != T or any(b <= a for a, b in zip(cu, cu[1:])):
        raise RefError(f"batch {path}: cu_seqlens must start at 0, strictly increase "
                       f"and end at len(tokens)={T}; got {cu[:8]}{'...' if len(cu) > 8 else ''}")
    if T and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise RefError(f"batch {path}: token ids must be in [0, {vocab_size}), "
                       f"got range [{tokens.min()}, {tokens.max()}]")
    return tokens, cu


def load_mask_data(path):
    """The batch's optional per-document mask data -> (prefix_lens list or None, segment_ids ndarray or None)."""
    with open_h5(path, "batch") as f:
        pl = [int(x) for x in np.asarray(f["prefix_lens"]).reshape(-1)] if "prefix_lens" in f else None
        seg = np.asarray(f["segment_ids"]).reshape(-1).astype(np.int64) if "segment_ids" in f else None
    return pl, seg


def write_checkpoint(path, cfg, params):
    with open_h5(path, "checkpoint", "w") as f:
        g = f.create_group("model")
        for k in INT_KEYS:
            g.attrs[k] = np.int64(cfg[k])
        for k in FLOAT_KEYS:
            g.attrs[k] = np.float64(cfg[k])
        g.attrs["tie_word_embeddings"] = np.int64(cfg["tie_word_embeddings"])
        g.attrs["attention_kernel"] = cfg["attention_kernel"]   # variable-length string
        if cfg["attention_kernel"] == "dca":
            for k in DCA_INT_KEYS:
                g.attrs[k] = np.int64(cfg[k])
            g.attrs["dca_mscale"] = np.float64(cfg["dca_mscale"])
        if cfg.get("logit_scaling", "none") != "none":
            g.attrs["logit_scaling"] = cfg["logit_scaling"]
            g.attrs["logit_scaling_length"] = np.int64(cfg["logit_scaling_length"])
        if cfg.get("rope_scaling", "none") != "none":
            g.attrs["rope_scaling"] = cfg["rope_scaling"]
            g.attrs["rope_scaling_factor"] = np.float64(cfg["rope_scaling_factor"])
            g.attrs["rope_original_length"] = np.int64(cfg["rope_original_length"])
        for name, a in params.items():
            f.create_dataset("params/" + h5name(name), data=np.asarray(a, dtype=np.float32))


def write_batch(path, tokens, cu):
    with open_h5(path, "batch", "w") as f:
        f.create_dataset("tokens", data=np.asarray(tokens, dtype=np.int32))
        f.create_dataset("cu_seqlens", data=np.asarray(cu, dtype=np.int32))


def write_grads(path, loss, grads):
    with open_h5(path, "grads", "w") as f:
        f.attrs["loss"] = np.float64(loss)
        for name, g in grads.items():
            f.create_dataset("grads/" + h5name(name), data=np.asarray(g, dtype=np.float64))


def read_grads_file(path, names):
    """-> (loss, {name: float64 ndarray}, [unexpected dataset paths under /grads])."""
    with open_h5(path, "grads") as f:
        loss = float(read_attr(f, "loss", f"/ of {path}"))
        if not isinstance(f.get("grads"), h5py.Group):
            raise RefError(f"missing group '/grads' in grads file {path}")
        grads = {n: np.asarray(read_dataset(f, "grads/" + h5name(n), f"grads file {path}"),
                               dtype=np.float64) for n in names}
        extra = sorted(set(list_datasets(f["grads"])) - {h5name(n) for n in names})
    return loss, grads, extra


# ----------------------------------------------------------------------------
# Model math (float64)
# ----------------------------------------------------------------------------

def rmsnorm(x, w, eps):
    # x: (T, C), w: (C,) -> (T, C)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


ROPE = {"scaling": "none"}   # the checkpoint's RoPE scaling and the batch's longest document


def rope_inv_freq(hd, theta):
    # (hd/2,) rotation frequencies under the RoPE scaling in ROPE:
    #   linear:  every frequency divided by the factor s (position interpolation)
    #   dynamic: base theta * (s * L / L0 - (s - 1)) ** (hd / (hd - 2)) when the batch's
    #            longest document L exceeds the trained length L0
    #   yarn:    frequency j kept if it turns more than 32 times over L0, divided by s if
    #            it turns less than once, blended linearly in the pair index in between
    i = torch.arange(hd // 2, dtype=DT)
    kind, s = ROPE["scaling"], ROPE.get("factor", 1.0)
    if kind == "dynamic" and ROPE["longest"] > ROPE["original"]:
        theta = theta * (s * ROPE["longest"] / ROPE["original"] - (s - 1)) ** (hd / (hd - 2))
    inv = theta ** (-(2 * i) / hd)
    if kind == "linear":
        inv = inv / s
    if kind == "yarn":
        L0 = ROPE["original"]
        # pair index j at which L0 * inv_j / (2 pi) = r turns: j = hd ln(L0 / (2 pi r)) / (2 ln theta)
        def at(r):
            return hd * math.log(L0 / (2 * math.pi * r)) / (2 * math.log(theta))
        # the ends rounded outwards and clamped to [0, hd - 1], as the YaRN reference does
        lo = max(math.floor(at(32.0)), 0)
        hi = min(math.ceil(at(1.0)), hd - 1)
        if hi == lo:
            hi += 1e-3
        w = ((i - lo) / (hi - lo)).clamp(0.0, 1.0)    # 1: interpolate, 0: keep
        inv = inv * (1 - w) + (inv / s) * w
    return inv


def rope_magnitude():
    # yarn multiplies cos and sin by 0.1 ln s + 1 (the logits by its square)
    s = ROPE.get("factor", 1.0)
    return 0.1 * math.log(s) + 1.0 if ROPE["scaling"] == "yarn" and s > 1 else 1.0


def rope_cos_sin(pos, hd, theta):
    # pos: (T,) float64 position inside the document -> cos, sin: (T, 1, hd)
    inv_freq = rope_inv_freq(hd, theta)                  # (hd/2,)
    ang = pos[:, None] * inv_freq[None, :]               # (T, hd/2)
    ang = torch.cat([ang, ang], dim=-1)                  # (T, hd)
    m = rope_magnitude()
    return m * ang.cos()[:, None, :], m * ang.sin()[:, None, :]


def rotate_half(x):
    # x: (..., hd) -> cat(-x[hd/2:], x[:hd/2])
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


# lct's train.precision = bf16, emulated (--bf16): every product of a linear layer,
# forward and both backward products, and every block product of core attention take
# their operands rounded to bfloat16 (through float32, ties to even, as lct rounds its
# float32 values) and are summed here in float64; the SwiGLU takes gate and up rounded,
# as lct saves them, and each layer's input is rounded (lct keeps it as bf16), its
# gradient passed through. lct sums in float32, so the two agree
# to float32 summation error plus the rare operand that lands on the other side of a
# bf16 rounding boundary (and, in attention, P rounded against a running maximum where
# a document spans several key blocks).
BF16 = False


def bf16(t):
    return t.to(torch.float32).to(torch.bfloat16).to(DT)


def bf16_values(t):
    """t's values rounded to bf16 with the gradient passed through unchanged (lct's
    attention reads Q as bf16 values; its dQ is not rounded). Autograd through bf16()
    itself would round the gradient too."""
    return t + (bf16(t) - t).detach()


class Bf16Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return bf16(x) @ bf16(w).T

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return bf16(g) @ bf16(w), bf16(g).T @ bf16(x)


def linear(x, w):
    """x (T, I) @ w (O, I)^T, as lct's Linear layers (no bias)."""
    return Bf16Linear.apply(x, w) if BF16 else x @ w.T


class Bf16SwiGLU(torch.autograd.Function):
    """silu(gate) * up as lct computes it in bf16: from gate and up rounded to bf16 (as
    lct saves them and recomputes act from them), forward and backward."""

    @staticmethod
    def forward(ctx, g, u):
        g, u = bf16(g), bf16(u)
        ctx.save_for_backward(g, u)
        return F.silu(g) * u

    @staticmethod
    def backward(ctx, do):
        g, u = ctx.saved_tensors
        s = torch.sigmoid(g)
        return do * u * s * (1 + g * (1 - s)), do * g * s


def swiglu(g, u):
    return Bf16SwiGLU.apply(g, u) if BF16 else F.silu(g) * u



class Bf16CoreAttention(torch.autograd.Function):
    """One document's core attention as lct computes it in bf16. qs: (R, H, L, hd) the
    query tiles lct packs (logit scale times Q, rotated for each of R key classes),
    k, v: (H, L, hd) as lct receives them, cls: (L, L) the class of each (query, key)
    pair, -1 where the key is not visible. Rounded operands: Q, K, V, dO, P (for P V and
    P^T dO) and dS; D = rowsum(dO * O) sums the rounded dO and O; softmax statistics
    and D are not rounded. (The caller rounds Q before it scales or rotates it.)"""

    @staticmethod
    def forward(ctx, qs, k, v, cls):
        qb, kb, vb = bf16(qs), bf16(k), bf16(v)
        s = torch.full(qs.shape[1:3] + (k.shape[1],), float("-inf"), dtype=DT)   # (H, L, L)
        for c in range(qs.shape[0]):
            s = torch.where(cls == c, qb[c] @ kb.transpose(1, 2), s)
        m = s.max(dim=-1, keepdim=True).values
        e = torch.exp(s - m)
        l = e.sum(dim=-1, keepdim=True)
        o = (bf16(e) @ vb) / l
        lse = m + torch.log(l)
        ctx.save_for_backward(qb, kb, vb, cls, s, lse, o)
        return o

    @staticmethod
    def backward(ctx, do):
        qb, kb, vb, cls, s, lse, o = ctx.saved_tensors
        dob = bf16(do)
        p = torch.exp(s - lse)                                  # 0 where masked
        dv = bf16(p).transpose(1, 2) @ dob
        dp = dob @ vb.transpose(1, 2)
        D = (dob * bf16(o)).sum(dim=-1, keepdim=True)
        ds = bf16(p * (dp - D))
        dqs = torch.zeros_like(qb)
        dk = torch.zeros_like(kb)
        for c in range(qb.shape[0]):
            dsc = torch.where(cls == c, ds, torch.zeros_like(ds))
            dqs[c] = dsc @ kb
            dk = dk + dsc.transpose(1, 2) @ qb[c]
        return dqs, dk, dv, None


# attention.mask of the checkpoint and the batch's per-document data (set by forward and
# main), written from the mask definitions, not from lct's code
MASK = {"kind": "causal", "prefix_lens": None, "segment_ids": None}


def document_mask(d, s, L):
    """(L, L) bool: query i (row) reads key j (column) of document d starting at row s."""
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    kind, m = MASK["kind"], j <= i
    if kind == "sliding_window":
        m = m & (j > i - MASK["window"])
    elif kind == "sink_window":
        m = m & ((j > i - MASK["window"]) | (j < MASK["sink_tokens"]))
    elif kind == "chunked":
        m = m & (i // MASK["block_size"] == j // MASK["block_size"])
    elif kind == "prefix_lm":
        m = m | (j < MASK["prefix_lens"][d])
    elif kind == "shared_question":
        seg = torch.as_tensor(MASK["segment_ids"][s:s + L])
        m = m & ((seg[None, :] == 0) | (seg[None, :] == seg[:, None]))
    elif kind == "block_sparse":
        m = m & (i // MASK["block_size"] == j // MASK["block_size"])   # the own block; block_sparse_mask adds
    elif kind != "causal":
        raise RefError(f"unknown attention_mask '{kind}'")
    return m


def block_sparse_mask(own, qd, kd, rep):
    """(H, L, L) bool: attention_mask block_sparse (MoBA) for one document, from its
    definition: query i of block b = i // B reads its own block causally (own) and, per kv
    head group, the top_blocks earlier blocks of highest score mean_h(q_i,h) . mean_j(k_j)
    (the group's query heads, the block's keys; after RoPE; under bf16 their bf16 values,
    which lct's kernel reads), all of them if fewer, ties to the later block. The
    selection is not differentiated.
    qd: (H, L, hd), kd: (KV, L, hd)."""
    B, K = MASK["block_size"], MASK["top_blocks"]
    H, L, hd = qd.shape
    KV = kd.shape[0]
    m = own.expand(H, L, L).clone()
    blocks = L // B
    if K == 0 or blocks == 0:
        return m
    with torch.no_grad():
        qs, ks = (bf16(qd), bf16(kd)) if BF16 else (qd, kd)
        qbar = qs.detach().double().reshape(KV, rep, L, hd).mean(dim=1)              # (KV, L, hd)
        kbar = ks.detach().double()[:, :blocks * B].reshape(KV, blocks, B, hd).mean(dim=2)
        score = (qbar @ kbar.transpose(1, 2)).tolist()                               # (KV, L, blocks)
    for g in range(KV):
        for i in range(B, L):
            b = i // B
            top = sorted(range(b), key=lambda n: (score[g][i][n], n), reverse=True)[:K]
            for n in top:
                m[g * rep:(g + 1) * rep, i, n * B:(n + 1) * B] = True
    return m


def attention(q, k, v, cu):
    # q: (T, H, hd); k, v: (T, KV, hd); cu: document boundaries -> (T, H*hd)
    T, H, hd = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)                  # (T, H, hd): head h uses kv h // rep
    v = v.repeat_interleave(rep, dim=1)
    outs = []
    for d, (s, e) in enumerate(zip(cu[:-1], cu[1:])):    # each document on its own
        L = e - s
        qd, kd, vd = (t[s:e].transpose(0, 1) for t in (q, k, v))   # (H, L, hd)
        causal = document_mask(d, s, L)                             # key j <= query i, and the mask
        if MASK["kind"] == "block_sparse":                          # (H, L, L): per kv head group
            causal = block_sparse_mask(causal, qd, k[s:e, ::rep].transpose(0, 1), rep)
        if BF16:
            cls = torch.where(causal, 0, -1)
            o = Bf16CoreAttention.apply((bf16_values(qd) / math.sqrt(hd))[None], kd, vd, cls)
            outs.append(o.transpose(0, 1).reshape(L, H * hd))
            continue
        scores = qd @ kd.transpose(1, 2) / math.sqrt(hd)            # (H, L, L)
        scores = scores.masked_fill(~causal, float("-inf"))
        p = scores.softmax(dim=-1)                                  # (H, L, L)
        p = torch.nan_to_num(p, nan=0.0)                            # a row that reads no key: O = 0
        outs.append((p @ vd).transpose(0, 1).reshape(L, H * hd))    # (L, H*hd)
    return torch.cat(outs, dim=0)


def dca_relative_positions(L, C, w):
    """(L, L) int64: the RoPE distance DCA uses for query i and key j <= i of one
    document (arXiv 2402.17463, code convention: chunks of s = C - w tokens):
    intra-chunk i - j, successive chunk min(i mod s + s, C) - j mod s, earlier chunks
    min(2s - 1, C) - j mod s. Entries above the diagonal are unused."""
    s = C - w
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    delta = i // s - j // s
    succ = torch.clamp(i % s + s, max=C) - j % s
    inter = min(2 * s - 1, C) - j % s
    return torch.where(delta == 0, i - j, torch.where(delta == 1, succ, inter))


def rope_rotate(x, p, hd, theta):
    # x: (..., hd) rotated by the scalar position p (rotate_half convention)
    # (the logit <R(p) q, k> stands for <R(i) q, R(j) k>: yarn's magnitude enters twice)
    ang = p * rope_inv_freq(hd, theta)
    ang = torch.cat([ang, ang])
    m = rope_magnitude()
    return m * m * (x * ang.cos() + rotate_half(x) * ang.sin())


def dca_attention(cfg, q, k, v, cu):
    """Dense DCA from the explicit relative-position matrix. q: (T, H, hd) and
    k: (T, KV, hd) are *pre-RoPE*; the logit of (i, j) is
    mscale * <R(M_ij) q_i, k_j> / sqrt(hd), one softmax over j <= i per document."""
    T, H, hd = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    C, w, theta = cfg["dca_chunk_size"], cfg["dca_local_size"], cfg["rope_theta"]
    outs = []
    for s0, e in zip(cu[:-1], cu[1:]):
        L = e - s0
        mult = cfg["dca_mscale"]
        if cfg["dca_mscale_original_length"] > 0:
            mult *= max(1.0, 0.1 * math.log(L / cfg["dca_mscale_original_length"]) + 1.0)
        qd, kd, vd = (t[s0:e].transpose(0, 1) for t in (q, k, v))   # (H, L, hd)
        M = dca_relative_positions(L, C, w)
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        if BF16:  # as lct: K rotated by its key position, Q by one position per key class
            sc = C - w
            i = torch.arange(L, dtype=DT)
            kpos = i % sc
            qpos = [i % sc, torch.clamp(i % sc + sc, max=C), torch.full_like(i, min(2 * sc - 1, C))]
            def rot(x, pos):                                       # x (H, L, hd), pos (L,)
                cos, sin = rope_cos_sin(pos, hd, theta)             # (L, 1, hd)
                cos, sin = cos.transpose(0, 1), sin.transpose(0, 1)
                return x * cos + rotate_half(x) * sin
            qs = torch.stack([rot(bf16_values(qd), pos) * (mult / math.sqrt(hd)) for pos in qpos])
            ii, jj = torch.arange(L)[:, None], torch.arange(L)[None, :]
            cls = torch.where(causal, torch.clamp(ii // sc - jj // sc, max=2), -1)
            o = Bf16CoreAttention.apply(qs, rot(kd, kpos), vd, cls)
            outs.append(o.transpose(0, 1).reshape(L, H * hd))
            continue
        assert int(M[causal].max()) <= C and int(M[causal].min()) >= 0
        scores = torch.zeros(H, L, L, dtype=q.dtype)
        for d in torch.unique(M[causal]).tolist():                  # each distance once
            sd = rope_rotate(qd, float(d), hd, theta) @ kd.transpose(1, 2)
            scores = torch.where((M == d) & causal, sd, scores)
        scores = scores * (mult / math.sqrt(hd))
        scores = scores.masked_fill(~causal, float("-inf"))
        p = scores.softmax(dim=-1)
        outs.append((p @ vd).transpose(0, 1).reshape(L, H * hd))
    return torch.cat(outs, dim=0)


def positions(cu):
    # (T,) float64: offset of each token inside its own document
    return torch.cat([torch.arange(e - s, dtype=DT) for s, e in zip(cu[:-1], cu[1:])])


def logit_scales(cfg, cu):
    """(T,) float64: each query's logit factor under attention.logit_scaling, a function
    of the n = position + 1 keys it reads: ln(n) / ln(L) (logn), max(1, that)
    (logn_beyond), 1 (none). Multiplying q multiplies every logit of its row."""
    kind = cfg.get("logit_scaling", "none")
    n = positions(cu) + 1
    if kind == "none":
        return torch.ones_like(n)
    f = torch.log(n) / math.log(cfg["logit_scaling_length"])
    return torch.clamp(f, min=1.0) if kind == "logn_beyond" else f


def forward(cfg, P, tokens, cu):
    """P: {name: float64 tensor}; tokens: (T,) int64 tensor -> logits (T, V)."""
    C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, T = C // H, cfg["rms_norm_eps"], tokens.shape[0]
    ROPE.clear()
    ROPE.update(scaling=cfg.get("rope_scaling", "none"), factor=cfg.get("rope_scaling_factor", 1.0),
                original=cfg.get("rope_original_length", 0), longest=max(int(e - b) for b, e in zip(cu[:-1], cu[1:])))
    cos, sin = rope_cos_sin(positions(cu), hd, cfg["rope_theta"])   # (T, 1, hd)
    set_mask(cfg, cu)

    x = P["model.embed_tokens.weight"][tokens]                       # (T, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if BF16:   # lct keeps each layer's input as bf16 (its gradient passes through)
            x = bf16_values(x)
        h = rmsnorm(x, P[p + "input_layernorm.weight"], eps)         # (T, C)
        q = linear(h, P[p + "self_attn.q_proj.weight"]).view(T, H, hd)
        k = linear(h, P[p + "self_attn.k_proj.weight"]).view(T, KV, hd)
        v = linear(h, P[p + "self_attn.v_proj.weight"]).view(T, KV, hd)
        q = q * logit_scales(cfg, cu)[:, None, None]
        if cfg["attention_kernel"] == "dca":     # positions come from the relative matrix
            a = dca_attention(cfg, q, k, v, cu)
        else:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            a = attention(q, k, v, cu)
        x = x + linear(a, P[p + "self_attn.o_proj.weight"])
        h2 = rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate = linear(h2, P[p + "mlp.gate_proj.weight"])              # (T, I)
        up = linear(h2, P[p + "mlp.up_proj.weight"])                  # (T, I)
        x = x + linear(swiglu(gate, up), P[p + "mlp.down_proj.weight"])   # (T, C)
    hf = rmsnorm(x, P["model.norm.weight"], eps)
    w_lm = P["model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"]
    return linear(hf, w_lm)                                          # (T, V)


def set_mask(cfg, cu):
    MASK.update(kind=cfg.get("attention_mask", "causal"), window=cfg.get("attention_window", 0),
                sink_tokens=cfg.get("attention_sink_tokens", 0), block_size=cfg.get("attention_block_size", 0),
                top_blocks=cfg.get("attention_top_blocks", 0))
    if MASK["kind"] == "prefix_lm" and MASK["prefix_lens"] is None:
        raise RefError("attention_mask prefix_lm needs the batch's prefix_lens")
    if MASK["kind"] == "shared_question" and MASK["segment_ids"] is None:
        raise RefError("attention_mask shared_question needs the batch's segment_ids")


def target_positions(cu):
    # indices t whose next token t+1 is in the same document (all but each doc's last)
    # and which the mask trains: prefix_lm not inside the prefix (t + 1 < P), shared_question
    # not across segments
    out = []
    for d, (s, e) in enumerate(zip(cu[:-1], cu[1:])):
        for t in range(s, e - 1):
            if MASK["kind"] == "prefix_lm" and t - s + 1 < MASK["prefix_lens"][d]:
                continue
            if MASK["kind"] == "shared_question" and MASK["segment_ids"][t + 1] != MASK["segment_ids"][t]:
                continue
            out.append(t)
    return torch.as_tensor(out, dtype=torch.long)


def loss_fn(cfg, P, tokens, cu):
    """-> (mean cross-entropy over all targets the mask trains, number of targets)."""
    set_mask(cfg, cu)
    idx = target_positions(cu)
    n = int(idx.numel())
    if n == 0:
        raise RefError("batch has zero prediction targets (every document has length 1)")
    logits = forward(cfg, P, tokens, cu)
    return F.cross_entropy(logits[idx], tokens[idx + 1], reduction="sum") / n, n


def loss_and_grads(cfg, params, tokens, cu):
    """params: {name: ndarray} -> (loss float, n_targets, {name: float64 ndarray grad})."""
    P = {n: torch.tensor(a, dtype=DT, requires_grad=True) for n, a in params.items()}
    loss, n = loss_fn(cfg, P, torch.as_tensor(tokens, dtype=torch.long), cu)
    loss.backward()
    grads = {k: (t.grad.numpy() if t.grad is not None else np.zeros(t.shape)) for k, t in P.items()}
    return float(loss), n, grads


# ----------------------------------------------------------------------------
# Comparison
# ----------------------------------------------------------------------------

def compare(other_loss, other_grads, extra, ref_loss, ref_grads, rtol, label):
    """Compare `other` (a) to reference (b); prints one line per tensor. -> True if all pass."""
    ok_all = True
    print(f"comparing {label} (a) against reference (b), rtol={rtol:g}")
    for name, b in ref_grads.items():
        a = other_grads[name]
        if a.shape != b.shape:
            print(f"{name:<48s} FAIL shape {a.shape} != {b.shape}")
            ok_all = False
            continue
        d = a - b
        max_abs = float(np.max(np.abs(d))) if d.size else 0.0
        rel = float(np.linalg.norm(d) / max(np.linalg.norm(b), 1e-30))
        ok = rel <= rtol            # False for NaN too
        ok_all &= ok
        print(f"{name:<48s} max_abs={max_abs:.3e} rel={rel:.3e} {'ok' if ok else 'FAIL'}")
    for e in extra:
        print(f"{'/grads/' + e:<48s} FAIL unexpected tensor (not a parameter of this model)")
        ok_all = False
    rel = abs(other_loss - ref_loss) / max(abs(ref_loss), 1e-30)
    ok = rel <= rtol
    ok_all &= ok
    print(f"{'loss':<48s} a={other_loss:.12g} b={ref_loss:.12g} "
          f"abs={abs(other_loss - ref_loss):.3e} rel={rel:.3e} {'ok' if ok else 'FAIL'}")
    print("PASS" if ok_all else "FAIL")
    return ok_all


# ----------------------------------------------------------------------------
# Random checkpoints / batches
# ----------------------------------------------------------------------------

def random_params(cfg, rng, std=0.3):
    # norm weights around 1, everything else N(0, std^2); rounded to float32 like the file
    return {n: ((1.0 if n.endswith("norm.weight") else 0.0) + std * rng.standard_normal(s))
            .astype(np.float32).astype(np.float64) for n, s in param_shapes(cfg).items()}


def random_batch(vocab_size, lengths, rng):
    if not lengths or min(lengths) < 1:
        raise RefError(f"--lengths must be a non-empty list of positive ints, got {lengths}")
    cu = [0] + np.cumsum(lengths).tolist()
    return rng.integers(0, vocab_size, size=cu[-1]).astype(np.int64), cu


# ----------------------------------------------------------------------------
# Self test
# ----------------------------------------------------------------------------

def self_test():
    rng = np.random.default_rng(1234)
    ok_all = True

    def check(cond, msg):
        nonlocal ok_all
        ok_all &= bool(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {msg}")

    for tied in (0, 1):
        cfg = dict(vocab_size=13, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0,
                   rms_norm_eps=1e-5, tie_word_embeddings=tied, attention_kernel="causal")
        params = random_params(cfg, rng)
        tokens, cu = random_batch(cfg["vocab_size"], [5, 1, 7], rng)
        tok = torch.as_tensor(tokens)

        # (a) autograd vs central finite differences on a few entries of every tensor
        _, _, grads = loss_and_grads(cfg, params, tokens, cu)
        P = {n: torch.tensor(a, dtype=DT) for n, a in params.items()}

        def L():
            with torch.no_grad():
                return float(loss_fn(cfg, P, tok, cu)[0])

        h, worst = 1e-5, 0.0
        for name, g in grads.items():
            flat = P[name].view(-1)
            picks = {int(np.argmax(np.abs(g))), *rng.integers(0, g.size, size=2).tolist()}
            for j in picks:
                orig = float(flat[j])
                flat[j] = orig + h; lp = L()
                flat[j] = orig - h; lm = L()
                flat[j] = orig
                fd, ag = (lp - lm) / (2 * h), float(g.reshape(-1)[j])
                worst = max(worst, abs(fd - ag) / (1e-6 + abs(ag)))
        check(worst < 1e-5, f"tied={tied}: autograd vs finite differences, "
                            f"worst |fd-ag|/(1e-6+|ag|) = {worst:.2e}")

        # (b) packed two-document batch == each document alone (logits and loss)
        ta, tb = random_batch(cfg["vocab_size"], [6], rng)[0], random_batch(cfg["vocab_size"], [9], rng)[0]
        packed = torch.as_tensor(np.concatenate([ta, tb]))
        cu2 = [0, 6, 15]
        with torch.no_grad():
            lp = forward(cfg, P, packed, cu2)
            la = forward(cfg, P, torch.as_tensor(ta), [0, 6])
            lb = forward(cfg, P, torch.as_tensor(tb), [0, 9])
            diff = max(float((lp[:6] - la).abs().max()), float((lp[6:] - lb).abs().max()))
            loss_p = float(loss_fn(cfg, P, packed, cu2)[0]) * 13
            loss_s = (float(loss_fn(cfg, P, torch.as_tensor(ta), [0, 6])[0]) * 5
                      + float(loss_fn(cfg, P, torch.as_tensor(tb), [0, 9])[0]) * 8)
        check(diff < 1e-12, f"tied={tied}: packed vs separate documents, max logit diff = {diff:.2e}")
        check(abs(loss_p - loss_s) < 1e-10, f"tied={tied}: packed loss sum = separate loss sums "
                                            f"(diff {abs(loss_p - loss_s):.2e})")

        # (c) file round trip: checkpoint -> batch -> grads file -> compare with itself
        with tempfile.TemporaryDirectory() as d:
            ck, bf, gf = (os.path.join(d, n) for n in ("ck.h5", "b.h5", "g.h5"))
            write_checkpoint(ck, cfg, params)
            write_batch(bf, tokens, cu)
            cfg2, params2 = load_checkpoint(ck)
            tokens2, cu3 = load_batch(bf, cfg2["vocab_size"])
            loss2, _, grads2 = loss_and_grads(cfg2, params2, tokens2, cu3)
            write_grads(gf, loss2, grads2)
            l3, g3, extra = read_grads_file(gf, list(grads2))
            same = (cfg2 == cfg and l3 == loss2 and not extra
                    and all(np.array_equal(g3[n], grads2[n]) for n in grads2))
        check(same, f"tied={tied}: HDF5 round trip reproduces config, loss and gradients exactly")

    # (d) DCA: the worked example of the DCA notes (s=4, w=2, C=6, L=12), and DCA ==
    # causal attention for documents of at most C + 1 tokens (successive parts run,
    # every distance is still exact), but not beyond
    M = dca_relative_positions(12, 6, 2)
    check(M[11].tolist() == [6, 5, 4, 3, 6, 5, 4, 3, 3, 2, 1, 0]
          and M[9, :10].tolist() == [6, 5, 4, 3, 5, 4, 3, 2, 1, 0]
          and M[7, :8].tolist() == [6, 5, 4, 3, 3, 2, 1, 0],
          "dca: relative positions of the worked example")
    cfg_d = dict(cfg, attention_kernel="dca", dca_chunk_size=10, dca_local_size=3,
                 dca_mscale=1.0, dca_mscale_original_length=0)
    P = {n: torch.tensor(a, dtype=DT) for n, a in random_params(cfg, rng).items()}
    with torch.no_grad():
        short = torch.as_tensor(random_batch(cfg["vocab_size"], [11, 4], rng)[0])
        d_short = float((forward(cfg, P, short, [0, 11, 15])
                         - forward(cfg_d, P, short, [0, 11, 15])).abs().max())
        long = torch.as_tensor(random_batch(cfg["vocab_size"], [14], rng)[0])
        d_long = float((forward(cfg, P, long, [0, 14]) - forward(cfg_d, P, long, [0, 14])).abs().max())
    check(d_short < 1e-12 and d_long > 1e-6,
          f"dca: equals causal for L <= C+1 (diff {d_short:.1e}), differs beyond (diff {d_long:.1e})")

    print("SELF-TEST PASSED" if ok_all else "SELF-TEST FAILED")
    return ok_all


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", help="lct parameter file (HDF5)")
    ap.add_argument("--batch-file", help="packed batch file (HDF5: tokens, cu_seqlens)")
    ap.add_argument("--grads-out", help="write loss + float64 gradients here")
    ap.add_argument("--compare", metavar="LCT_GRADS.h5", help="grads file to check")
    ap.add_argument("--reference-grads", metavar="REF.h5",
                    help="compare --compare against this grads file instead of recomputing")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--bf16", action="store_true",
                    help="emulate lct's train.precision = bf16 (linear and attention products of bf16-rounded operands)")
    ap.add_argument("--make-batch", metavar="B.h5")
    ap.add_argument("--lengths", help="comma-separated document lengths, e.g. 7,1,33")
    ap.add_argument("--make-checkpoint", metavar="CKPT.h5")
    ap.add_argument("--vocab-size", type=int)
    ap.add_argument("--hidden-size", type=int)
    ap.add_argument("--intermediate-size", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-norm-eps", type=float, default=1e-5)
    ap.add_argument("--tie-word-embeddings", action="store_true")
    ap.add_argument("--attention-kernel", default="causal", choices=("causal", "dca"))
    ap.add_argument("--dca-chunk-size", type=int, default=2048)
    ap.add_argument("--dca-local-size", type=int, default=256)
    ap.add_argument("--dca-mscale", type=float, default=1.0)
    ap.add_argument("--dca-mscale-original-length", type=int, default=0)
    ap.add_argument("--rope-scaling", default="none", choices=("none", "linear", "dynamic", "yarn"))
    ap.add_argument("--rope-scaling-factor", type=float, default=1.0)
    ap.add_argument("--rope-original-length", type=int, default=0)
    ap.add_argument("--logit-scaling", default="none", choices=("none", "logn", "logn_beyond"))
    ap.add_argument("--logit-scaling-length", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--jobs", metavar="FILE",
                    help="run many invocations in this one process (torch is imported once): each line of FILE "
                         "is OUT followed by this script's arguments (shell-quoted); a job's output goes to OUT "
                         "and its exit code to OUT.rc")
    return ap.parse_args(argv)


def require(args, *names):
    missing = [n for n in names if getattr(args, n) is None]
    if missing:
        raise RefError("missing required option(s): "
                       + ", ".join("--" + n.replace("_", "-") for n in missing))


def run_jobs(path):
    """--jobs FILE: one process for many invocations (a test's dozens of comparisons pay
    torch's import once). Returns 0 when every job ran to an exit code (whatever it was)."""
    import contextlib
    import io
    import shlex
    try:
        lines = [ln for ln in open(path, encoding="utf-8").read().splitlines() if ln.strip()]
    except OSError as e:
        raise RefError(f"--jobs {path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        words = shlex.split(line)
        if len(words) < 2:
            raise RefError(f"--jobs {path}:{number}: expected OUT and arguments, got '{line}'")
        out, argv = words[0], words[1:]
        if "--jobs" in argv:
            raise RefError(f"--jobs {path}:{number}: a job may not run --jobs")
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            try:
                rc = main(argv)
            except RefError as e:
                print(f"error: {e}", file=sys.stderr)
                rc = 2
            except SystemExit as e:  # argparse's refusal of an argument
                rc = e.code if isinstance(e.code, int) else 2
        with open(out, "w", encoding="utf-8") as f:
            f.write(text.getvalue())
        with open(out + ".rc", "w", encoding="utf-8") as f:
            f.write(f"{rc}\n")
    return 0


def main(argv=None):
    global BF16
    args = parse_args(argv)
    if args.jobs:
        others = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--jobs" and a != args.jobs]
        if others:
            raise RefError("--jobs takes no other option (each job line has its own)")
        return run_jobs(args.jobs)
    BF16 = args.bf16
    torch.set_num_threads(1)
    modes = sum(bool(m) for m in (args.self_test, args.make_batch, args.make_checkpoint))
    if modes > 1:
        raise RefError("choose at most one of --self-test, --make-batch, --make-checkpoint")

    if args.self_test:
        return 0 if self_test() else 1

    rng = np.random.default_rng(args.seed)
    if args.make_batch:
        require(args, "vocab_size", "lengths")
        try:
            lengths = [int(s) for s in args.lengths.split(",") if s.strip()]
        except ValueError:
            raise RefError(f"--lengths must be comma-separated integers, got '{args.lengths}'")
        if args.vocab_size <= 0:
            raise RefError("--vocab-size must be positive")
        tokens, cu = random_batch(args.vocab_size, lengths, rng)
        write_batch(args.make_batch, tokens, cu)
        print(f"wrote {args.make_batch}: T={len(tokens)} documents={len(lengths)}")
        return 0

    if args.make_checkpoint:
        require(args, "vocab_size", "hidden_size", "intermediate_size", "layers", "heads", "kv_heads")
        cfg = dict(vocab_size=args.vocab_size, hidden_size=args.hidden_size,
                   intermediate_size=args.intermediate_size, num_hidden_layers=args.layers,
                   num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                   rope_theta=args.rope_theta, rms_norm_eps=args.rms_norm_eps,
                   tie_word_embeddings=int(args.tie_word_embeddings),
                   attention_kernel=args.attention_kernel)
        if args.rope_scaling != "none":
            cfg.update(rope_scaling=args.rope_scaling, rope_scaling_factor=args.rope_scaling_factor,
                       rope_original_length=args.rope_original_length)
        if args.logit_scaling != "none":
            cfg.update(logit_scaling=args.logit_scaling, logit_scaling_length=args.logit_scaling_length)
        if args.attention_kernel == "dca":
            cfg.update(dca_chunk_size=args.dca_chunk_size, dca_local_size=args.dca_local_size,
                       dca_mscale=args.dca_mscale,
                       dca_mscale_original_length=args.dca_mscale_original_length)
        validate_config(cfg)
        write_checkpoint(args.make_checkpoint, cfg, random_params(cfg, rng))
        print(f"wrote {args.make_checkpoint}")
        return 0

    # Compare two existing grads files (no model computation).
    if args.reference_grads:
        require(args, "compare")
        with open_h5(args.reference_grads, "grads") as f:
            if not isinstance(f.get("grads"), h5py.Group):
                raise RefError(f"missing group '/grads' in {args.reference_grads}")
            names = sorted(n.replace("/", ".") for n in list_datasets(f["grads"]))
        ref_loss, ref_grads, _ = read_grads_file(args.reference_grads, names)
        loss, grads, extra = read_grads_file(args.compare, names)
        return 0 if compare(loss, grads, extra, ref_loss, ref_grads, args.rtol, args.compare) else 1

    # Evaluate the reference model on the batch.
    require(args, "checkpoint", "batch_file")
    cfg, params = load_checkpoint(args.checkpoint)
    tokens, cu = load_batch(args.batch_file, cfg["vocab_size"])
    MASK["prefix_lens"], MASK["segment_ids"] = load_mask_data(args.batch_file)
    loss, n, grads = loss_and_grads(cfg, params, tokens, cu)
    print(f"loss={loss:.15g} targets={n} tokens={len(tokens)} documents={len(cu) - 1}")
    if args.grads_out:
        write_grads(args.grads_out, loss, grads)
        print(f"wrote {args.grads_out}")
    if args.compare:
        other_loss, other_grads, extra = read_grads_file(args.compare, list(grads))
        return 0 if compare(other_loss, other_grads, extra, loss, grads, args.rtol, args.compare) else 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RefError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
