#!/usr/bin/env python3
"""Memory per rank vs context length (DistCA §5: CAD keeps every rank's token-linear
activations and adds only transient attention buffers; context parallelism divides a
sequence's activations over its group): colocated DP (dp = 2), per-document context
parallelism (cp = 2) and CAD (dp = 2), each on 2 ranks (one per core), measured as the
largest rank's peak activation bytes and peak resident memory after one step on
sequences of L tokens drawn from the `prolong64k` mix scaled to L.

Colocated and CAD ranks each hold a whole L-token sequence; the two cp ranks share one.

  /usr/bin/python3 scripts/experiments/memory.py [--quick] [--out DIR] [--config F]
"""
import os

import common

NAME = "memory"
PLACEMENTS = {
    "colocated": [],
    "cp2": ["--parallel.cp", "2"],
    "cad": ["--attention.placement", "cad"],
}


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    lengths = [256, 512, 1024] if a.quick else [2048, 4096, 8192, 16384]
    rows = []
    for length in lengths:
        data = ["--data.doc_lengths", "prolong64k", "--data.seq_len", str(length),
                "--data.max_doc_len", str(length), "--train.micro_batches", "1", "--train.steps", "1"]
        for p, extra in PLACEMENTS.items():
            m = common.mpi_train(2, data + extra, a.quick, a.config, os.path.join(a.out, f"run_{p}_{length}"))
            rows.append({"placement": p, "ranks": 2, "seq_len": length,
                         "tokens_per_rank": length // 2 if p == "cp2" else length,
                         "peak_activation_mib": max(x["peak_activation_bytes"] for x in m) / 2**20,
                         "peak_rss_mib": max(x["peak_rss_bytes"] for x in m) / 2**20})
    base = {r["seq_len"]: r for r in rows if r["placement"] == "colocated"}
    for r in rows:
        r["activation_vs_colocated"] = r["peak_activation_mib"] / base[r["seq_len"]]["peak_activation_mib"]
    columns = ["placement", "ranks", "seq_len", "tokens_per_rank", "peak_activation_mib", "peak_rss_mib",
               "activation_vs_colocated"]
    print(common.write_outputs(a.out, NAME, rows, columns, "Memory per rank vs context length",
                               "Peak activations and resident memory of the largest rank after one step. "
                               "DistCA: CAD's memory overhead is the in-flight attention buffers; context "
                               "parallelism halves a sequence's activations per rank at cp = 2."))
    fig, ax = common.subplots(1, 2, figsize=(11, 4.2))
    for j, p in enumerate(PLACEMENTS):
        rs = [r for r in rows if r["placement"] == p]
        ax[0].plot([r["seq_len"] for r in rs], [r["peak_activation_mib"] for r in rs], "o-", color=f"C{j}", label=p)
        ax[1].plot([r["seq_len"] for r in rs], [r["peak_rss_mib"] for r in rs], "o-", color=f"C{j}", label=p)
    for k, label in enumerate(["peak activations per rank (MiB)", "peak resident memory per rank (MiB)"]):
        common.log2_axes(ax[k], "context length L (tokens per sequence)", label, logy=True)
    fig.suptitle("Memory per rank vs context length, 2 ranks (largest rank)")
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
