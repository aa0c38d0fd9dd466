#!/usr/bin/env python3
"""Context-parallel mechanisms side by side (LongCA-bench, arXiv 2510.17896): ring (P2P),
all-gather, Ulysses (all-to-all), hybrid (USP / Megatron a2a+p2p: Ulysses inside groups of
2, ring across them) and double ring (LoongTrain: inner rings of 2) on the `pretrain` and
`prolong64k` mixes and on one long document. Measured at cp = 2 on 2 ranks (one per core,
one thread each) against one rank, in alternating rounds; the hybrid and the double ring
need cp >= 4 (at cp = 2 they would be Ulysses and the ring), so they appear from cp = 4
on, where `lct simulate` predicts every method (and cp = 2 too, set against the measured
figures). Reports tokens/s, bytes sent per rank and step, the exposed exchange, memory per
rank and where each method stops scaling.

  /usr/bin/python3 scripts/experiments/cp_methods.py [--quick] [--out DIR] [--config F]
"""
import os
import statistics

import common

NAME = "cp_methods"
MIXES = {"pretrain": ["--data.doc_lengths", "pretrain"], "prolong64k": ["--data.doc_lengths", "prolong64k"],
         "one_document": ["--data.doc_lengths", "fixed"]}
METHODS = ["ring", "allgather", "ulysses", "hybrid", "double_ring"]
MEASURABLE_AT_2 = ["ring", "allgather", "ulysses"]


def method_args(method, cp):
    return ["--parallel.cp", str(cp), "--parallel.dp", "1", "--parallel.cp_comm", method,
            "--parallel.cp_ulysses", str(max(2, cp // 2)), "--parallel.cp_inner_ring", "2"]


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    seq = "512" if a.quick else "4096"
    steps = "4" if a.quick else "5"
    rounds = 1 if a.quick else 2
    rows = []
    for mix, extra in MIXES.items():
        data = extra + ["--data.seq_len", seq, "--data.max_doc_len", seq, "--train.micro_batches", "1"]
        runs = {}
        for r in range(rounds):  # alternating rounds: one rank, then each method at cp = 2
            for method in ["one"] + MEASURABLE_AT_2:
                ranks = 1 if method == "one" else 2
                args = ["--train.steps", steps] + data + ([] if method == "one" else method_args(method, 2))
                m = common.mpi_train(ranks, args, a.quick, a.config, os.path.join(a.out, f"run_{mix}_{method}_{r}"))
                runs.setdefault(method, []).append(m)
        # throughput: total tokens over total wall-clock time of the steps after the first
        one = [common.wall_clock(m, warmup=1)["tokens_per_s"] for m in runs["one"]]
        for method in MEASURABLE_AT_2:
            tps = [common.wall_clock(m, warmup=1)["tokens_per_s"] for m in runs[method]]
            speedups = [t / o for t, o in zip(tps, one)]
            xs = [x for m in runs[method] for x in m[1:]]
            rows.append({"source": "measured", "mix": mix, "cp": 2, "seq_len": int(seq), "method": method,
                         "tokens_per_s": statistics.median(tps),
                         "speedup_over_one_rank": statistics.median(speedups),
                         "speedup_spread": f"{min(speedups):.2f}-{max(speedups):.2f}",
                         "mib_sent_per_rank_step": statistics.median(x["exchange_bytes_sent"] for x in xs) / 2**20,
                         "exposed_percent": 100 * statistics.median(x["exchange_exposed_fraction"] for x in xs),
                         "memory_mib_per_rank": max(x["peak_rss_bytes"] for m in runs[method] for x in m) / 2**20,
                         "limit": ""})
    # predictions: one calibration (on the measured sequences) for all of them
    common.simulate(["--ranks", "1", "--steps", "1", "--calibration-steps", "1" if a.quick else "2",
                     "--data.seq_len", seq, "--data.max_doc_len", seq], a.quick, a.config, a.out)
    for mix, extra in MIXES.items():
        data = extra + ["--data.seq_len", seq, "--data.max_doc_len", seq, "--train.micro_batches", "1"]
        for cp in (2, 4, 8):
            for method in METHODS:
                if cp == 2 and method not in MEASURABLE_AT_2:
                    continue
                # the measured runs' steps 2.. (the same sequences), or the run plan's
                # one-line refusal of this method at cp (the rule, without the command's prefix)
                s, why = common.simulate(["--ranks", str(cp), "--first-step", "1", "--steps", str(int(steps) - 1)] +
                                         data + method_args(method, cp), a.quick, a.config, a.out, refusal=True)
                why = why.split(f"--ranks {cp}: ", 1)[-1]
                row = {"source": "simulated", "mix": mix, "cp": cp, "seq_len": int(seq), "method": method,
                       "limit": why}
                if not why:
                    row.update({"tokens_per_s": s["tokens_per_s"],
                                "mib_sent_per_rank_step": s["exchange_bytes_per_rank"] / 2**20,
                                "exposed_percent": 100 * s["exchange_exposed_fraction"],
                                "memory_mib_per_rank": s["memory_per_rank_bytes"] / 2**20})
                    meas = [r for r in rows if r["source"] == "measured" and r["mix"] == mix and r["cp"] == cp
                            and r["method"] == method]
                    if meas:
                        row["error_vs_measured_percent"] = 100 * (s["tokens_per_s"] / meas[0]["tokens_per_s"] - 1)
                rows.append(row)
    columns = ["source", "mix", "cp", "seq_len", "method", "tokens_per_s", "speedup_over_one_rank", "speedup_spread",
               "mib_sent_per_rank_step", "exposed_percent", "memory_mib_per_rank", "error_vs_measured_percent",
               "limit"]
    notes = ("Throughput: total tokens over total wall-clock time of steps 2.. of each run; measured rows give the "
             f"median of {rounds} alternating round(s) and the spread of the speedup over one rank; predictions "
             "cover the same steps' sequences. Simulated memory is lct's estimate without the process baseline "
             "(measured: peak RSS, which includes it). The trade-offs LongCA-bench is read for: Ulysses fast but "
             "capped by the head count, rings scaling at some cost in efficiency, hybrids in between (a third-party "
             "summary of the paper adds that ring P2P degrades under causal and document masks). The `limit` "
             "column gives the rule that stops a method.")
    print(common.write_outputs(a.out, NAME, rows, columns, "Context-parallel mechanisms", notes))
    fig, ax = common.subplots(1, len(MIXES), figsize=(15, 4.2), sharey=False)
    for i, mix in enumerate(MIXES):
        for j, method in enumerate(METHODS):
            common.plot_simulated_and_measured(ax[i], rows, "cp", "tokens_per_s", f"C{j}", f"{method}, simulated",
                                               f"{method}, measured", mix=mix, method=method)
        common.log2_axes(ax[i], "cp", "tokens/s" if i == 0 else None, f"{mix} ({seq} tokens)", legend=False)
    ax[-1].legend(fontsize=7)
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
