#!/usr/bin/env python3
"""Where a pass-key model's attention goes when it answers: per layer and head, the share
of the answer queries' attention on the key line, against the largest weight any one
other key gets and the effective number of keys (exp of the entropy), in float64.

For each document of a pass-key batch (lct make-batch --data.source passkey, or the
merged batches of passkey.py), the rows that predict the answer's digits (the batch's
answer_mask) are followed through every layer of the checkpoint under the attention it
is given: causal (plain RoPE) or DCA (chunk C, local w: the relative positions of
arXiv 2402.17463, as scripts/reference_llama.py and lct compute them), with the logit
scaling (attention.logit_scaling) and DCA's length temperature. The forward runs in
query blocks, so no T x T matrix is held (16 x L documents of 8,192 tokens fit).

This is the attention evidence beside passkey.py's per-position losses: as a document
grows past the trained length, does the retrieval head's weight on the key line shrink
(attention dilution: more keys share the softmax) or move?

  /usr/bin/python3 scripts/experiments/passkey_attention.py --checkpoint CKPT.h5
      --batch B.h5 [--documents 5] [--kernel causal|dca --dca-chunk-size C
      --dca-local-size W --dca-mscale-original-length L0] [--logit-scaling KIND
      --logit-scaling-length L] [--csv OUT.csv] [--label TEXT]
  /usr/bin/python3 scripts/experiments/passkey_attention.py --self-test

Prints one line per (layer, head): the mean over documents and answer rows; --csv
appends the same rows (label, length, layer, head, key_line_share, top_other_weight,
effective_keys, documents).
"""
import argparse
import csv
import math
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reference_llama as ref  # noqa: E402  (the float64 reference's layers)

DT = torch.float64
KEY_LINE = b"\nThe pass key is "
BLOCK = 512  # query rows per block


def key_line_span(doc):
    """[begin, end) of the key line in a document's bytes (ends at the line's newline)."""
    raw = bytes(int(t) for t in doc)
    b = raw.find(KEY_LINE)
    if b < 0:
        raise SystemExit("passkey_attention: a document without a key line (not a pass-key batch?)")
    e = raw.index(b"\n", b + 1) + 1
    return b, e


def rotate(x, pos, hd, theta):
    """x (L, H, hd) rotated by per-row positions pos (L,) float64."""
    cos, sin = ref.rope_cos_sin(pos, hd, theta)
    return x * cos + ref.rotate_half(x) * sin


def attend(args, q, k, v, rows_of_interest, stats):
    """One document's attention, query block by query block: q (L, H, hd) pre-RoPE and
    already scaled by the logit factor, k, v (L, KV, hd). Returns (L, H * hd); for the
    rows in rows_of_interest adds their weights (H, len, L) to stats["p"]."""
    L, H, hd = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    theta = args.theta
    i = torch.arange(L, dtype=DT)
    mult = 1.0 / math.sqrt(hd)
    if args.kernel == "dca":
        C, w = args.dca_chunk_size, args.dca_local_size
        s = C - w
        if args.dca_mscale_original_length > 0:
            mult *= max(1.0, 0.1 * math.log(L / args.dca_mscale_original_length) + 1.0)
        kr = rotate(k, i % s, hd, theta)                       # keys at their in-chunk position
        qs = [rotate(q, i % s, hd, theta), rotate(q, torch.clamp(i % s + s, max=C), hd, theta),
              rotate(q, torch.full_like(i, min(2 * s - 1, C)), hd, theta)]
        chunk = torch.arange(L) // s
    else:
        kr = rotate(k, i, hd, theta)
        qr = rotate(q, i, hd, theta)
    out = torch.empty(L, H, hd, dtype=DT)
    for b in range(0, L, BLOCK):
        e = min(L, b + BLOCK)
        if args.kernel == "dca":
            delta = (chunk[b:e, None] - chunk[None, :]).clamp(min=0, max=2)          # (rows, L)
            sc = [torch.einsum("rhd,khd->hrk", qq[b:e], kr) for qq in qs]
            scores = torch.where(delta == 0, sc[0], torch.where(delta == 1, sc[1], sc[2])) * mult
        else:
            scores = torch.einsum("rhd,khd->hrk", qr[b:e], kr) * mult                # (H, rows, L)
        causal = torch.arange(L)[None, :] <= torch.arange(b, e)[:, None]
        scores = scores.masked_fill(~causal, float("-inf"))
        p = scores.softmax(dim=-1)
        out[b:e] = torch.einsum("hrk,khd->rhd", p, v)
        for r in rows_of_interest:
            if b <= r < e:
                stats.setdefault("p", []).append(p[:, r - b, :].clone())            # (H, L)
    return out.reshape(L, H * hd)


def document_evidence(args, cfg, P, doc, answer_rows):
    """Per layer: (H, len(answer_rows), L) attention weights of the answer rows."""
    C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, L = C // H, cfg["rms_norm_eps"], len(doc)
    n = torch.arange(1, L + 1, dtype=DT)
    if args.logit_scaling == "none":
        factor = torch.ones(L, dtype=DT)
    else:
        factor = torch.log(n) / math.log(args.logit_scaling_length)
        if args.logit_scaling == "logn_beyond":
            factor = torch.clamp(factor, min=1.0)
    x = P["model.embed_tokens.weight"][torch.as_tensor(doc, dtype=torch.long)]
    layers = []
    for li in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{li}."
        h = ref.rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(L, H, hd) * factor[:, None, None]
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(L, KV, hd)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(L, KV, hd)
        stats = {}
        a = attend(args, q, k, v, answer_rows, stats)
        layers.append(torch.stack(stats["p"], dim=1))                              # (H, rows, L)
        x = x + a @ P[p + "self_attn.o_proj.weight"].T
        h2 = ref.rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        x = x + ref.swiglu(h2 @ P[p + "mlp.gate_proj.weight"].T, h2 @ P[p + "mlp.up_proj.weight"].T) @ \
            P[p + "mlp.down_proj.weight"].T
    return layers


def self_test():
    """The blocked attention equals scripts/reference_llama.py's dense causal and DCA
    attention (float64, blocks smaller than the document); exit 1 when not."""
    global BLOCK
    BLOCK, worst = 64, 0.0
    torch.manual_seed(0)
    L, H, KV, hd = 300, 4, 2, 16
    q, k, v = (torch.randn(L, n, hd, dtype=DT) for n in (H, KV, KV))
    cu = [0, L]
    for kernel in ("causal", "dca"):
        a = argparse.Namespace(kernel=kernel, theta=10000.0, dca_chunk_size=100, dca_local_size=20,
                               dca_mscale_original_length=64)
        stats = {}
        got = attend(a, q, k, v, [5, 299], stats)
        if kernel == "dca":
            want = ref.dca_attention({"dca_chunk_size": 100, "dca_local_size": 20, "rope_theta": 10000.0,
                                      "dca_mscale": 1.0, "dca_mscale_original_length": 64}, q, k, v, cu)
        else:
            ref.set_mask({}, cu)
            cos, sin = ref.rope_cos_sin(ref.positions(cu), hd, 10000.0)
            want = ref.attention(q * cos + ref.rotate_half(q) * sin, k * cos + ref.rotate_half(k) * sin, v, cu)
        err = float((got - want).abs().max())
        rows = torch.stack(stats["p"])               # (2, H, L): rows 5 and 299
        worst = max(worst, err, float((rows.sum(-1) - 1).abs().max()), float(rows[0, :, 6:].abs().max()))
        print(f"self-test {kernel}: max |blocked - reference| = {err:.2e}")
    # float64 sums of 300 terms of magnitude ~1: 1e-12 is far above rounding, far below a bug
    if worst > 1e-12:
        raise SystemExit(f"passkey_attention: self-test failed ({worst:.2e})")
    print("passkey_attention self-test: ok")


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="lct checkpoint or parameter file (.h5)")
    ap.add_argument("--batch", required=True, help="pass-key batch file with answer_mask")
    ap.add_argument("--documents", type=int, default=5, help="documents to follow (evenly over the batch)")
    ap.add_argument("--kernel", choices=("causal", "dca"), default="causal")
    ap.add_argument("--dca-chunk-size", type=int, default=0)
    ap.add_argument("--dca-local-size", type=int, default=0)
    ap.add_argument("--dca-mscale-original-length", type=int, default=0)
    ap.add_argument("--logit-scaling", choices=("none", "logn", "logn_beyond"), default=None,
                    help="default: the checkpoint's")
    ap.add_argument("--logit-scaling-length", type=int, default=0)
    ap.add_argument("--csv", help="append the rows here")
    ap.add_argument("--label", default="", help="the csv rows' label (e.g. recipe:kernel)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    try:
        cfg, params = ref.load_checkpoint(args.checkpoint)
    except ref.RefError as e:
        raise SystemExit(f"passkey_attention: {e}")
    if cfg.get("rope_scaling", "none") != "none" or cfg.get("attention_mask", "causal") != "causal":
        raise SystemExit("passkey_attention: RoPE scaling and attention masks other than causal are not followed")
    if args.logit_scaling is None:
        args.logit_scaling = cfg.get("logit_scaling", "none")
        args.logit_scaling_length = cfg.get("logit_scaling_length", 0)
    if args.logit_scaling != "none" and args.logit_scaling_length < 2:
        raise SystemExit("passkey_attention: --logit-scaling needs --logit-scaling-length >= 2")
    if args.kernel == "dca" and not 0 < args.dca_local_size < args.dca_chunk_size:
        raise SystemExit("passkey_attention: --kernel dca needs 0 < --dca-local-size < --dca-chunk-size")
    args.theta = cfg["rope_theta"]
    P = {n: torch.tensor(a, dtype=DT) for n, a in params.items()}
    with h5py.File(args.batch, "r") as f:
        tokens, cu, mask = f["tokens"][...], f["cu_seqlens"][...], f["answer_mask"][...]
    ndocs = len(cu) - 1
    picks = sorted({int(round(x)) for x in np.linspace(0, ndocs - 1, min(args.documents, ndocs))})
    per_head = {}  # (layer, head) -> [key share, top other weight, effective keys] per (doc, row)
    L = 0
    for d in picks:
        doc = tokens[cu[d]:cu[d + 1]]
        L = len(doc)
        rows = [t - cu[d] for t in range(cu[d], cu[d + 1]) if mask[t]]
        b, e = key_line_span(doc)
        for li, p in enumerate(document_evidence(args, cfg, P, doc, rows)):
            for h in range(p.shape[0]):
                for r in range(p.shape[1]):
                    w = p[h, r]
                    share = float(w[b:e].sum())
                    other = torch.cat([w[:b], w[e:]])
                    ent = float(-(w[w > 0] * w[w > 0].log()).sum())
                    per_head.setdefault((li, h), []).append((share, float(other.max()), math.exp(ent)))
    out_rows = []
    for (li, h), vals in sorted(per_head.items()):
        m = np.mean(np.asarray(vals), axis=0)
        out_rows.append({"label": args.label, "length": L, "layer": li, "head": h, "key_line_share": round(m[0], 4),
                         "top_other_weight": round(m[1], 4), "effective_keys": round(m[2], 1),
                         "documents": len(picks)})
        print(f"{args.label} length {L} layer {li} head {h}: key line {m[0]:.3f} of the attention, top other key "
              f"{m[1]:.3f}, effective keys {m[2]:.1f} ({len(picks)} documents)")
    if args.csv:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(out_rows[0]), lineterminator="\n")
            if new:
                wr.writeheader()
            wr.writerows(out_rows)


if __name__ == "__main__":
    main()
