#!/usr/bin/env python3
"""Activation recomputation: peak memory and step time against tokens per sequence
(train.recompute = none | selective | full, fp32 and bf16, one process, every core).

For each length L (default 64K, 256K and 1M tokens per sequence of the `pretrain` mix,
documents up to 16K tokens), each mode and precision: `lct train --dry-run`'s estimate
per rank and whether it fits this machine; where it fits, two real steps under
/usr/bin/time: the peak resident memory of the process (VmHWM) against the estimate,
the stored and scratch bytes per token, and the step time of the second step (the
first is the warm-up: first-touch allocation). The paper comparison (Korthikanti et al.
2022, "Reducing Activation Recomputation in Large Transformer Models"): selective
recomputation costs a few percent, full recomputation 30-40 %.

  /usr/bin/python3 scripts/experiments/recompute.py [--quick] [--out DIR] [--config F]
        [--lengths 65536,262144,1048576] [--precisions fp32,bf16] [--modes none,selective,full]
"""
import json
import os
import re
import sys

import common

NAME = "recompute"
MODES = ("none", "selective", "full")
PRECISIONS = ("fp32", "bf16")


def dry_run(args, quick, config):
    """--dry-run's estimate (GiB) and whether it fits."""
    text = common.lct(["train", "--dry-run"] + args, quick, config)
    m = re.search(r"memory per rank \(estimate, largest rank\): ([0-9.]+) (MiB|GiB)", text)
    est = float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
    return est, "fits: yes" in text


def train(args, quick, config, out_dir):
    """Two steps under /usr/bin/time; returns (metrics rows, peak RSS in GiB)."""
    peak_file = out_dir + ".peak"
    cmd = ["/usr/bin/time", "-f", "%M", "-o", peak_file, common.LCT, "train", "--config", config] + \
        common.quick_model(quick, args) + ["--train.steps", "2", "--checkpoint.every", "0",
                                           "--checkpoint.dir", out_dir, "--checkpoint.overwrite", "true"] + args
    r = common.run(cmd, "lct train")
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    return rows, float(open(peak_file).read().split()[-1]) / 2**20


def option(name, default):
    """--name VALUE, taken out of sys.argv (common.arguments parses the shared options)."""
    if name not in sys.argv:
        return default
    i = sys.argv.index(name)
    value = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    return value


def main():
    lengths = [int(x) for x in option("--lengths", "2048,4096" if "--quick" in sys.argv
                                      else "65536,262144,1048576").split(",")]
    precisions = option("--precisions", ",".join(PRECISIONS)).split(",")
    modes = option("--modes", ",".join(MODES)).split(",")
    a = common.arguments(NAME, __doc__.splitlines()[0])
    rows = []
    for length in lengths:
        data = ["--data.doc_lengths", "pretrain", "--data.seq_len", str(length),
                "--data.max_doc_len", str(min(length, 16384))]
        for precision in precisions:
            for mode in modes:
                args = data + ["--train.precision", precision, "--train.recompute", mode]
                est, fits = dry_run(args, a.quick, a.config)
                row = {"seq_len": length, "precision": precision, "recompute": mode,
                       "estimate_gib": est, "fits": "yes" if fits else "no"}
                if fits:
                    m, peak = train(args, a.quick, a.config, os.path.join(a.out, f"run_{length}_{precision}_{mode}"))
                    row.update({"peak_rss_gib": peak, "estimate_over_peak": est / peak,
                                "step_s": m[-1]["ms"] / 1e3,
                                "stored_kib_per_token": m[-1]["activation_bytes_per_token"] / 1024,
                                "scratch_kib_per_token": m[-1]["scratch_bytes_per_token"] / 1024})
                rows.append(row)
                print(row, flush=True)
    for r in rows:  # time against none at the same length and precision, where none ran
        base = [b for b in rows if b["seq_len"] == r["seq_len"] and b["precision"] == r["precision"]
                and b["recompute"] == "none" and "step_s" in b]
        if base and "step_s" in r:
            r["step_vs_none"] = r["step_s"] / base[0]["step_s"]
    columns = ["seq_len", "precision", "recompute", "estimate_gib", "fits", "peak_rss_gib", "estimate_over_peak",
               "step_s", "step_vs_none", "stored_kib_per_token", "scratch_kib_per_token"]
    print(common.write_outputs(
        a.out, NAME, rows, columns, "Activation recomputation: memory and step time against sequence length",
        "One process, every core; the pretrain mix with documents up to 16K tokens. Step time: the second "
        "step by the wall clock (the first is the warm-up). estimate_over_peak: --dry-run's estimate over "
        "the measured peak resident memory (an upper bound when >= 1). Korthikanti et al. 2022: selective "
        "recomputation costs a few percent, full 30-40 %; lct's selective recomputes every token-linear "
        "product but the down projection (their selective recomputes only core attention), so it costs "
        "more here (docs/performance.md, 'Activation memory')."))
    fig, ax = common.subplots(1, 2, figsize=(11, 4.2))
    for j, mode in enumerate(MODES):
        for precision, style in (("fp32", "o-"), ("bf16", "s--")):
            rs = [r for r in rows if r["recompute"] == mode and r["precision"] == precision and "step_s" in r]
            if not rs:
                continue
            label = f"{mode} {precision}"
            ax[0].plot([r["seq_len"] for r in rs], [r["peak_rss_gib"] for r in rs], style, color=f"C{j}", label=label)
            ax[1].plot([r["seq_len"] for r in rs], [r["step_s"] for r in rs], style, color=f"C{j}", label=label)
    for k, label in enumerate(["peak resident memory (GiB)", "step time (s, second step)"]):
        common.log2_axes(ax[k], "tokens per sequence", label, logy=True, legend=8)
    fig.suptitle("Activation recomputation, one process (pretrain mix, documents up to 16K)")
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
