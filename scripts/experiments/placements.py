#!/usr/bin/env python3
"""Throughput of placements across length distributions (DistCA Figs. 9 and 10: CAD
1.07-1.35x over WLB-ideal): colocated data parallelism, DP + packing, per-document
context parallelism (cp = 2) and CAD on the `pretrain`, `prolong64k` and `prolong512k`
mixes, as speedup over colocated DP. Measured on 2 ranks (one per core) with
4K-token sequences, so long documents are cut at 4K; simulated by `lct simulate` at
8-64 ranks with 64K-token sequences.

  /usr/bin/python3 scripts/experiments/placements.py [--quick] [--out DIR] [--config F]
"""
import os
import statistics

import common

NAME = "placements"
MIXES = ["pretrain", "prolong64k", "prolong512k"]
PLACEMENTS = {
    "colocated": [],
    "packing": ["--parallel.dp_balance", "packing"],
    "cp2": ["--parallel.cp", "2"],
    "cad": ["--attention.placement", "cad"],
}


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    rows = []
    seq_measured = "512" if a.quick else "4096"
    for mix in MIXES:
        data = ["--data.doc_lengths", mix, "--data.seq_len", seq_measured, "--data.max_doc_len", seq_measured]
        tps = {}
        for p, extra in PLACEMENTS.items():
            m = common.mpi_train(2, ["--train.steps", "4" if a.quick else "10"] + data + extra, a.quick,
                                 a.config, os.path.join(a.out, f"run_{mix}_{p}"))
            tps[p] = common.wall_clock(m)["tokens_per_s"]  # steps 3..: total tokens / total time
            m = m[2:]
            rows.append({"source": "measured", "mix": mix, "ranks": 2, "seq_len": int(seq_measured),
                         "placement": p, "tokens_per_s": tps[p],
                         "idle_percent": 100 * statistics.median(x["idle_fraction"] for x in m)})
        for r in rows[-len(PLACEMENTS):]:
            r["speedup_over_colocated"] = r["tokens_per_s"] / tps["colocated"]
    seq_sim = "2048" if a.quick else "65536"
    # one calibration for every prediction, timed on the measured runs' sequences (a
    # 64K-token calibration step would take minutes of long-document attention)
    common.simulate(["--ranks", "2", "--steps", "1", "--calibration-steps", "1" if a.quick else "3",
                     "--data.seq_len", seq_measured, "--data.max_doc_len", seq_measured], a.quick, a.config, a.out)
    for mix in MIXES:
        data = ["--data.doc_lengths", mix, "--data.seq_len", seq_sim, "--data.max_doc_len", seq_sim]
        for n in ([8] if a.quick else [8, 16, 32, 64]):
            tps = {}
            for p, extra in PLACEMENTS.items():
                s = common.simulate(["--ranks", str(n), "--steps", "2" if a.quick else "4"] + data + extra,
                                    a.quick, a.config, a.out)
                tps[p] = s["tokens_per_s"]
                rows.append({"source": "simulated", "mix": mix, "ranks": n, "seq_len": int(seq_sim),
                             "placement": p, "tokens_per_s": s["tokens_per_s"],
                             "idle_percent": 100 * s["idle_fraction"]})
            for r in rows[-len(PLACEMENTS):]:
                r["speedup_over_colocated"] = r["tokens_per_s"] / tps["colocated"]
    columns = ["source", "mix", "ranks", "seq_len", "placement", "tokens_per_s", "speedup_over_colocated", "idle_percent"]
    print(common.write_outputs(a.out, NAME, rows, columns, "Placements across length distributions",
                               "DistCA: CAD 1.07-1.35x over WLB-ideal (packing + per-document CP, the best "
                               "DP x CP) on Llama-8B/34B with 128K-512K documents."))
    fig, ax = common.subplots(1, len(MIXES), figsize=(15, 4.2), sharey=True)
    for i, mix in enumerate(MIXES):
        for j, p in enumerate(PLACEMENTS):
            common.plot_simulated_and_measured(ax[i], rows, "ranks", "speedup_over_colocated", f"C{j}",
                                               f"{p}, simulated ({seq_sim} tokens)",
                                               f"{p}, measured ({seq_measured} tokens)", mix=mix, placement=p)
        ax[i].axhspan(1.07, 1.35, color="r", alpha=0.08, label="DistCA over WLB-ideal (paper)")
        common.log2_axes(ax[i], "ranks", "tokens/s over colocated DP" if i == 0 else None, mix, legend=False)
    ax[-1].legend(fontsize=7)
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
