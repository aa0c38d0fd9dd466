#!/usr/bin/env python3
"""Attention kernel across length distributions (LongCA-bench style): forward and
backward GFLOP/s of lct's blocked core attention, causal and DCA, on one packed
T-token batch drawn from each length distribution (scaled so the longest document is
T) and on one T-token document, each against the fp32 GEMM ceiling (the faster library) measured once
in the same run of the experiment, for every row (lct bench --ceilings-from; FlashAttention FLOP
convention: forward 4*H*hd*pairs, backward 2.5x).

  /usr/bin/python3 scripts/experiments/attention_kernel.py [--quick] [--out DIR] [--config F]
"""
import json

import common

NAME = "attention_kernel"
MIXES = ["pretrain", "pile", "prolong64k", "prolong512k", "fixed"]


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    tokens = "1024" if a.quick else "16384"
    rows = []
    for mix in MIXES:
        text = common.lct(["bench", "--json", "--sections", "attention", "--attention-lengths", tokens, "--attention-precisions", "fp32",
                           "--repeats", "1" if a.quick else "3", "--budget", "2" if a.quick else "20",
                           "--data.doc_lengths", mix, "--data.max_doc_len", tokens, "--data.seq_len", tokens] +
                          common.ceilings(a.quick, a.config, a.out), a.quick, a.config)
        b = json.loads(text)
        gemm, fma = b["ceilings"]["fp32_gemm_gflops"], b["ceilings"]["fma_gflops"]
        for r in b["attention"]["rows"]:
            if r["layout"] == "one-doc" and mix != MIXES[0]:
                continue  # the one-document row does not depend on the mix: report it once
            rows.append({"distribution": "one document" if r["layout"] == "one-doc" else mix,
                         "kernel": r["kernel"], "tokens": r["tokens"], "documents": r["documents"],
                         "fwd_gflops": r["fwd_gflops"], "bwd_gflops": r["bwd_gflops"],
                         "fwd_vs_gemm": r["fwd_gflops"] / gemm, "bwd_vs_gemm": r["bwd_gflops"] / gemm,
                         "fwd_bwd_vs_gemm": r["fwd_bwd_vs_fp32_gemm"], "fwd_bwd_vs_fma": r["fwd_bwd_vs_fma"],
                         "gemm_gflops": gemm, "gemm_library": b["ceilings"]["fp32_gemm_library"],
                         "dca_time_vs_causal": r.get("time_vs_causal", 1.0)})
    columns = ["distribution", "kernel", "tokens", "documents", "fwd_gflops", "bwd_gflops", "fwd_vs_gemm",
               "bwd_vs_gemm", "fwd_bwd_vs_gemm", "fwd_bwd_vs_fma", "gemm_gflops", "gemm_library", "dca_time_vs_causal"]
    print(common.write_outputs(a.out, NAME, rows, columns, "Attention kernel across length distributions",
                               f"DCA with chunk size {b['attention']['dca_chunk_size']} and local window "
                               f"{b['attention']['dca_local_size']} (the config's attention.dca_* keys); "
                               "ratios are to the same run's faster fp32 GEMM library (gemm_library) and FMA loop."))
    fig, ax = common.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    names = [r["distribution"] for r in rows if r["kernel"] == "causal"]
    x = range(len(names))
    for k, phase in enumerate(["fwd", "bwd"]):
        for j, kernel in enumerate(["causal", "dca"]):
            v = [r[f"{phase}_vs_gemm"] for r in rows if r["kernel"] == kernel]
            ax[k].bar([i + (j - 0.5) * 0.38 for i in x], v, 0.38, color=f"C{j}", label=kernel)
        ax[k].set_xticks(list(x))
        ax[k].set_xticklabels(names, rotation=20)
        ax[k].axhline(1.0, color="k", lw=0.8, ls="--")
        ax[k].set_title(f"{'forward' if phase == 'fwd' else 'backward'}, {tokens} tokens per batch")
        ax[k].grid(alpha=0.3, axis="y")
        ax[k].legend()
    ax[0].set_ylabel("GFLOP/s over same-run fp32 GEMM")
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
