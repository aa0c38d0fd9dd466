#!/usr/bin/python3
"""lct against PyTorch on the same model, sequence length and thread count.

Both sides train the model of an lct config (Llama: RMSNorm, RoPE, GQA, SwiGLU,
untied or tied head; float32; AdamW) on one document of seq_len tokens per step,
in one run of this script, and report tokens/s by wall clock (tokens over the total time of the steps after the first). PyTorch is Debian's
python3-torch (1.13: no fused scaled_dot_product_attention), so its attention is
the explicit softmax(QK^T)V with a causal mask, which needs an H x L x L score
tensor per layer. lct's side is `lct bench --sections step` on the same shape.

In bf16 (--precisions fp32,bf16, the default), lct trains with train.precision = bf16
and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) (bf16 matmuls on
oneDNN, fp32 weights and optimizer: the same mixed precision); the two precisions
alternate by round (--rounds), and each figure is the median over rounds with its range.

Then, at --oom-length (default 65536), lct trains a step while PyTorch is asked for
one forward/backward and is expected to fail allocating the score tensor.

Usage (run with Debian's python, which has torch):
  /usr/bin/python3 bench/compare_pytorch.py [--lct build/lct] [--config configs/default.toml]
      [--length 4096] [--steps 5] [--rounds 1] [--precisions fp32,bf16] [--threads 2]
      [--oom-length 65536] [--json]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("compare_pytorch.py: needs torch; run with /usr/bin/python3 after "
             "`bash scripts/setup.sh --python`")

try:
    import tomllib
except ImportError:  # Python < 3.11 (Debian bookworm's /usr/bin/python3 is 3.11)
    tomllib = None


def model_config(path):
    defaults = dict(vocab_size=256, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=False)
    if path:
        if tomllib is None:
            sys.exit("compare_pytorch.py: reading --config needs Python 3.11 (tomllib)")
        with open(path, "rb") as f:
            defaults.update(tomllib.load(f).get("model", {}))
    return defaults


class TorchLlama:
    """Plain float32 Llama with explicit attention; parameters in a dict like HF names."""

    def __init__(self, cfg, T):
        C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
        H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = C // H
        self.cfg, self.T, self.H, self.KV, self.hd = cfg, T, H, KV, hd
        g = torch.Generator().manual_seed(0)

        def w(*shape):
            return (torch.randn(*shape, generator=g) * 0.02).requires_grad_()

        self.P = {"embed": w(V, C), "norm": torch.ones(C, requires_grad=True)}
        if not cfg["tie_word_embeddings"]:
            self.P["lm_head"] = w(V, C)
        for i in range(cfg["num_hidden_layers"]):
            self.P.update({f"{i}.ln1": torch.ones(C, requires_grad=True), f"{i}.wq": w(H * hd, C),
                           f"{i}.wk": w(KV * hd, C), f"{i}.wv": w(KV * hd, C),
                           f"{i}.wo": w(C, H * hd), f"{i}.ln2": torch.ones(C, requires_grad=True),
                           f"{i}.wg": w(I, C), f"{i}.wu": w(I, C), f"{i}.wd": w(C, I)})
        pos = torch.arange(T, dtype=torch.float32)
        inv = cfg["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = torch.cat([pos[:, None] * inv[None]] * 2, dim=-1)        # (T, hd)
        self.cos, self.sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        self.mask = torch.ones(T, T, dtype=torch.bool).tril()

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"]) * w

    def rope(self, x):
        h = x.shape[-1] // 2
        return x * self.cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * self.sin

    def loss(self, tokens):
        P, T, H, KV, hd = self.P, self.T, self.H, self.KV, self.hd
        x = P["embed"][tokens]
        for i in range(self.cfg["num_hidden_layers"]):
            h = self.rms(x, P[f"{i}.ln1"])
            q = self.rope((h @ P[f"{i}.wq"].T).view(T, H, hd)).transpose(0, 1)     # (H, T, hd)
            k = self.rope((h @ P[f"{i}.wk"].T).view(T, KV, hd)).transpose(0, 1)    # (KV, T, hd)
            v = (h @ P[f"{i}.wv"].T).view(T, KV, hd).transpose(0, 1)
            k = k.repeat_interleave(H // KV, dim=0)
            v = v.repeat_interleave(H // KV, dim=0)
            s = (q @ k.transpose(1, 2)) / math.sqrt(hd)                              # (H, T, T)
            p = s.masked_fill(~self.mask, float("-inf")).softmax(-1)
            a = (p @ v).transpose(0, 1).reshape(T, H * hd)
            x = x + a @ P[f"{i}.wo"].T
            h2 = self.rms(x, P[f"{i}.ln2"])
            x = x + (F.silu(h2 @ P[f"{i}.wg"].T) * (h2 @ P[f"{i}.wu"].T)) @ P[f"{i}.wd"].T
        head = P["embed"] if self.cfg["tie_word_embeddings"] else P["lm_head"]
        logits = self.rms(x, P["norm"]) @ head.T
        return F.cross_entropy(logits[:-1], tokens[1:])


def torch_tokens_per_s(cfg, T, steps, precision="fp32"):
    model = TorchLlama(cfg, T)
    opt = torch.optim.AdamW(model.P.values(), lr=1e-3)
    tokens = torch.randint(0, cfg["vocab_size"], (T,), generator=torch.Generator().manual_seed(1))
    times = []
    for i in range(steps + 1):  # the first step is warm-up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model.loss(tokens)
        loss.backward()
        opt.step()
        if i > 0:
            times.append(time.perf_counter() - t0)
    return T * len(times) / sum(times), len(times)  # wall clock: total tokens / total time


def torch_oom(cfg, T):
    """One forward/backward at length T; returns (ok, message)."""
    try:
        model = TorchLlama(cfg, T)
        model.loss(torch.zeros(T, dtype=torch.long)).backward()
        return True, "trained"
    except RuntimeError as e:  # allocation failure
        return False, str(e).splitlines()[0][:160]


def lct_step(args, T, repeats, precision="fp32"):
    cmd = [args.lct, "bench", "--json", "--sections", "step", "--step-lengths", str(T),
           "--repeats", str(repeats), "--train.threads", str(args.threads),
           "--data.doc_lengths", "fixed", "--train.precision", precision]
    if args.config:
        cmd += ["--config", args.config]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"compare_pytorch.py: {' '.join(cmd)} failed:\n{out.stderr.strip()}")
    report = json.loads(out.stdout)
    return report, report["step"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lct", default=os.path.join(os.path.dirname(__file__), "..", "build", "lct"))
    ap.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..", "configs",
                                                     "default.toml"))
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 or both, comma-separated")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--oom-length", type=int, default=65536, help="0 skips the memory check")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.lct):
        sys.exit(f"compare_pytorch.py: no lct binary at {args.lct} (bash scripts/build.sh)")
    torch.set_num_threads(args.threads)  # torch defaults to 1 thread on this machine
    cfg = model_config(args.config)

    precisions = args.precisions.split(",")
    runs = {p: {"lct": [], "torch": []} for p in precisions}
    machine, lct_runs = None, 0
    for _ in range(args.rounds):  # alternate: each round runs every precision on both sides
        for p in precisions:
            machine, lct = lct_step(args, args.length, args.steps, p)
            lct_runs = lct["runs"]
            torch_tps, torch_runs = torch_tokens_per_s(cfg, args.length, args.steps, p)
            runs[p]["lct"].append(lct["tokens_per_s"])
            runs[p]["torch"].append(torch_tps)
    per = {}
    for p in precisions:
        ratios = [a / b for a, b in zip(runs[p]["lct"], runs[p]["torch"])]
        per[p] = {"lct_tokens_per_s": statistics.median(runs[p]["lct"]),
                  "torch_tokens_per_s": statistics.median(runs[p]["torch"]),
                  "speedup": statistics.median(ratios), "speedup_min": min(ratios),
                  "speedup_max": max(ratios), "lct_tokens_per_s_rounds": runs[p]["lct"],
                  "torch_tokens_per_s_rounds": runs[p]["torch"]}
    first = per[precisions[0]]
    result = {
        "machine": machine["machine"], "threads": args.threads, "length": args.length,
        "model": cfg, "torch_version": torch.__version__, "rounds": args.rounds,
        "lct_runs": lct_runs, "torch_runs": torch_runs, "precisions": per,
        # the first precision's figures at the top level, as before
        "lct_tokens_per_s": first["lct_tokens_per_s"], "torch_tokens_per_s": first["torch_tokens_per_s"],
        "speedup": first["speedup"],
    }
    if args.oom_length:
        _, lct_big = lct_step(args, args.oom_length, 1)
        ok, message = torch_oom(cfg, args.oom_length)
        result.update({"oom_length": args.oom_length, "lct_big_tokens_per_s": lct_big["tokens_per_s"],
                       "lct_big_peak_rss_bytes": lct_big["peak_rss_bytes"],
                       "torch_big_ok": ok, "torch_big_message": message})
    if args.json:
        print(json.dumps(result))
        return
    m = result["machine"]
    print(f"lct vs PyTorch {torch.__version__} | {m['cpu']} | {args.threads} threads | "
          f"OpenBLAS {m['openblas_core']} (OPENBLAS_CORETYPE={m['openblas_coretype_env']})")
    print(f"model: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, heads "
          f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']}, mlp {cfg['intermediate_size']}, "
          f"vocab {cfg['vocab_size']}; one document of {args.length} tokens per step, AdamW")
    print(f"  tokens/s by wall clock over {lct_runs} (lct) and {torch_runs} (PyTorch) steps after a warm-up; "
          f"median of {args.rounds} alternating round(s)")
    for p, r in per.items():
        side = "autocast bf16" if p == "bf16" else "fp32"
        print(f"  {p:5s} lct {r['lct_tokens_per_s']:9.0f}  PyTorch ({side}) {r['torch_tokens_per_s']:9.0f}  "
              f"lct / PyTorch = {r['speedup']:.2f}x (rounds {r['speedup_min']:.2f}-{r['speedup_max']:.2f})")
    if args.oom_length:
        print(f"at {args.oom_length} tokens: lct trains ({result['lct_big_tokens_per_s']:.0f} "
              f"tokens/s, peak RSS {result['lct_big_peak_rss_bytes'] / 2**30:.2f} GiB); "
              f"PyTorch: {'trains' if ok else 'fails: ' + message}")


if __name__ == "__main__":
    main()
