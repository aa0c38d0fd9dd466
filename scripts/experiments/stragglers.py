#!/usr/bin/env python3
"""Stragglers vs data-parallel degree (DistCA Fig. 4b: 2.1 / 19.2 / 55.4 % idle at DP
2 / 4 / 8 for the WLB baseline, Llama-8B, documents up to 512K tokens): idle and
compute max/mean of colocated data parallelism and of CAD, measured at dp = 2 (one rank
per core) and simulated by `lct simulate` from 2 to 64 ranks on the configured document
stream; and simulated with the paper's constants (Llama-8B's shape, 990 TFLOP/s,
50 GB/s, 512K-token sequences) for colocated, packing and CAD.

  /usr/bin/python3 scripts/experiments/stragglers.py [--quick] [--out DIR] [--config F]
"""
import os
import statistics

import common

NAME = "stragglers"
PAPER = {2: 2.1, 4: 19.2, 8: 55.4}


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    steps = 4 if a.quick else 20
    rows = []
    for placement, extra in (("colocated", []), ("cad", ["--attention.placement", "cad"])):
        metrics = common.mpi_train(2, ["--train.steps", str(steps)] + extra, a.quick, a.config,
                                   os.path.join(a.out, f"run_{placement}"))[2:] or []
        if metrics:
            rows.append({"source": "measured", "placement": placement, "ranks": 2,
                         "idle_percent": 100 * statistics.median(m["idle_fraction"] for m in metrics),
                         "compute_max_over_mean": statistics.median(m["compute_max_over_mean"] for m in metrics),
                         "paper_idle_percent": PAPER[2] if placement == "colocated" else ""})
        for n in ([2, 4, 8] if a.quick else [2, 4, 8, 16, 32, 64]):
            s = common.simulate(["--ranks", str(n), "--steps", "2" if a.quick else "8",
                                 "--calibration-steps", "1" if a.quick else "3"] + extra, a.quick, a.config, a.out)
            rows.append({"source": "simulated", "placement": placement, "ranks": n,
                         "idle_percent": 100 * s["idle_fraction"],
                         "compute_max_over_mean": s["compute_max_over_mean"],
                         "paper_idle_percent": PAPER.get(n, "") if placement == "colocated" else ""})
    # the paper's constants: Llama-8B's shape at 990 TFLOP/s and 50 GB/s (analytic costs),
    # one sequence of up to 512K tokens per rank from the `pretrain` mix
    long = "65536" if a.quick else "524288"
    for placement, extra in (("colocated", []), ("packing", ["--parallel.dp_balance", "packing"]),
                             ("cad", ["--attention.placement", "cad"])):
        for n in ([2, 4] if a.quick else [2, 4, 8, 16, 32, 64]):
            s = common.simulate_paper(["--ranks", str(n), "--steps", "2" if a.quick else "8",
                                       "--data.doc_lengths", "pretrain", "--data.seq_len", long,
                                       "--data.max_doc_len", long, "--train.micro_batches", "1"] + extra, a.config)
            rows.append({"source": "simulated, paper constants", "placement": placement, "ranks": n,
                         "idle_percent": 100 * s["idle_fraction"],
                         "compute_max_over_mean": s["compute_max_over_mean"],
                         "paper_idle_percent": PAPER.get(n, "") if placement == "packing" else ""})
    columns = ["source", "placement", "ranks", "idle_percent", "compute_max_over_mean", "paper_idle_percent"]
    print(common.write_outputs(a.out, NAME, rows, columns, "Stragglers vs data-parallel degree",
                               "paper_idle_percent: DistCA Fig. 4b, the WLB baseline (packing + per-document CP) on "
                               "Llama-8B with documents up to 512K tokens. 'simulated, paper constants': lct simulate "
                               "--tflops 990 --bandwidth 50 with Llama-8B's shape and 512K-token sequences (packing "
                               "stands in for WLB)."))
    fig, ax = common.subplots(figsize=(7, 4.2))
    for placement, style in (("colocated", "o-"), ("cad", "s-")):
        sim = [r for r in rows if r["source"] == "simulated" and r["placement"] == placement]
        ax.plot([r["ranks"] for r in sim], [r["idle_percent"] for r in sim], style, label=f"{placement}, simulated")
        meas = [r for r in rows if r["source"] == "measured" and r["placement"] == placement]
        ax.plot([r["ranks"] for r in meas], [r["idle_percent"] for r in meas], "k*" if placement == "colocated" else "kx",
                markersize=11, label=f"{placement}, measured")
    for placement, style in (("colocated", "o:"), ("packing", "d:"), ("cad", "s:")):
        sim = [r for r in rows if r["source"] == "simulated, paper constants" and r["placement"] == placement]
        ax.plot([r["ranks"] for r in sim], [r["idle_percent"] for r in sim], style,
                label=f"{placement}, simulated: Llama-8B, 990 TFLOP/s, 50 GB/s, {int(long) // 1024}K")
    ax.plot(list(PAPER), list(PAPER.values()), "r^--", label="DistCA Fig. 4b: WLB, 8B, 512K (paper)")
    common.log2_axes(ax, "data-parallel ranks", "idle, % of the step", "Stragglers vs data-parallel degree", legend=8)
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
