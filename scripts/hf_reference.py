#!/usr/bin/python3
"""A Hugging Face Llama folder read with NumPy alone, and its loss by a plain float64 forward.

    hf_reference.py MODEL_DIR BATCH.h5        # prints: loss <mean> targets <n>

An independent check of `lct export`: model.safetensors is parsed from the format's
specification (an 8-byte little-endian header length, a JSON header of dtype, shape and
data_offsets per tensor, the data) with NumPy, not with lct's code or the safetensors
package, and the forward is the Llama of transformers' LlamaForCausalLM as config.json
describes it: RMSNorm, grouped-query attention with causal masking and rotate_half RoPE
(rope_scaling none, linear, dynamic or yarn, as transformers computes them), SwiGLU, the
tied or untied head. Each document of the lct batch file (tokens, cu_seqlens; read with
h5py) runs as its own sequence from position 0; the loss is the mean cross-entropy of
every next token inside a document, as `lct eval` reports it. The "lct" object of
config.json (DCA, masks) is ignored, as transformers ignores it. dynamic scaling follows
transformers: each sequence scales by its own length (lct scales a packed batch by its
longest document, so the two agree when every document has the same length or none is
beyond the trained length).
"""
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F64": np.dtype("<f8")}


def read_safetensors(path):
    """-> {name: float64 ndarray}, metadata dict."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = DTYPES[e["dtype"]]
        a = np.frombuffer(data[b:end], dtype=dt)
        if e["dtype"] == "BF16":  # the upper 16 bits of a float32
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out, header.get("__metadata__", {})


def read_weights(folder):
    import os
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)[0]
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(os.path.join(folder, shard))[0])
    return out


def inv_freq(cfg, hd, seq_len):
    """transformers' rotation frequencies and attention factor for a sequence of seq_len."""
    theta = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    i = np.arange(0, hd, 2, dtype=np.float64)
    if kind == "dynamic":
        original = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
        if seq_len > original:
            theta = theta * ((rs["factor"] * seq_len / original) - (rs["factor"] - 1)) ** (hd / (hd - 2))
    inv = 1.0 / theta ** (i / hd)
    factor = 1.0
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "yarn":
        s = rs["factor"]
        original = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])

        def dim_at(turns):  # the dimension whose wavelength fits `turns` times in `original`
            return hd * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

        lo = max(math.floor(dim_at(32)), 0)
        hi = min(math.ceil(dim_at(1)), hd - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(hd // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extrapolation = 1 - ramp
        inv = (inv / s) * (1 - extrapolation) + inv * extrapolation
        factor = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
    elif kind != "default":
        raise SystemExit(f"rope_scaling {kind}: not implemented here")
    return inv, factor


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def forward(cfg, W, tokens):
    """tokens (L,) -> logits (L, V) of one sequence starting at position 0."""
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    hd = cfg.get("head_dim") or C // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    L = len(tokens)
    inv, mscale = inv_freq(cfg, hd, L)
    angle = np.arange(L, dtype=np.float64)[:, None] * inv[None, :]          # (L, hd/2)
    emb = np.concatenate([angle, angle], axis=-1)                           # (L, hd)
    cos, sin = np.cos(emb) * mscale, np.sin(emb) * mscale
    causal = np.triu(np.full((L, L), -np.inf), 1)
    x = W["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(L, H, hd).transpose(1, 0, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(L, KV, hd).transpose(1, 0, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(L, KV, hd).transpose(1, 0, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, H // KV, axis=0)
        v = np.repeat(v, H // KV, axis=0)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + causal
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        a = (s / s.sum(axis=-1, keepdims=True)) @ v                         # (H, L, hd)
        x = x + a.transpose(1, 0, 2).reshape(L, H * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return x @ head.T


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    import os
    import h5py
    folder, batch = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    W = read_weights(folder)
    with h5py.File(batch, "r") as f:
        tokens = np.asarray(f["tokens"]).reshape(-1).astype(np.int64)
        cu = [int(c) for c in np.asarray(f["cu_seqlens"]).reshape(-1)]
    total, n = 0.0, 0
    for b, e in zip(cu[:-1], cu[1:]):
        if e - b < 2:
            continue
        doc = tokens[b:e]
        logits = forward(cfg, W, doc)[:-1]
        m = logits.max(axis=-1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)))[:, 0]
        total += float(np.sum(lse - logits[np.arange(len(doc) - 1), doc[1:]]))
        n += len(doc) - 1
    print(f"loss {total / n:.12g} targets {n}")


if __name__ == "__main__":
    main()
