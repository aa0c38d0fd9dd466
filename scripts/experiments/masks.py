#!/usr/bin/env python3
"""Attention masks (LongCA-bench, arXiv 2510.17896): for each mask, the attention kernel's
forward+backward GFLOP/s counting only the pairs the mask lets through (LongCA-bench's
mask-aware FLOPs) against the fp32 GEMM ceiling (the faster library) of the same run of
the experiment (measured once at its start, for every row), on one document and on a packed
`pretrain` batch; a sliding window's time against sequence length (linear in T); and the
bytes each rank's exchange moves per mask (cp = 4: ring, all-gather, double ring, as the
simulator counts them, which is exactly what lct train sends); and the step throughput
of one rank, cp = 2 (ring, all-gather, Ulysses) and CAD dp = 2 on the `pretrain` mix, by
the wall clock in alternating rounds (one rank per core, one thread each), as speedups
over one rank with the same mask, with the busiest rank's bytes and the exchange's
exposed share of the step.

prefix_lm and shared_question take their per-document data from the packer
(data.prefix_fraction; data.answers_per_question): a quarter of each document as the
bidirectional prefix, and a fifth as the question followed by three answers.
full_document, bidirectional_window and causal_blockwise (LongCA-bench's masks that read
ahead) run in the kernel and exchange parts only: lct train refuses them. block_sparse
(MoBA) runs in the kernel and step parts (every layout), not in the simulated exchange
part (its exchanges depend on the content, which lct simulate cannot price);
scripts/experiments/block_sparse.py measures its quality, cost and the all-gather's
bytes. LongCA-bench's
causal global_sliding_window is sink_window (global tokens as sinks).

  /usr/bin/python3 scripts/experiments/masks.py [--quick] [--out DIR] [--config F]
"""
import json
import os
import statistics

import common

NAME = "masks"


def mask_args(quick):
    """The measured masks and their settings: windows of 1/8 of the step's sequence,
    4 sinks, blocks of 1/4; prefixes of 1/4 of each document, questions of 1/5 with 3
    answers."""
    w, b = ("64", "128") if quick else ("1024", "2048")
    return {"causal": [],
            "sliding_window": ["--attention.mask", "sliding_window", "--attention.window", w],
            "sink_window": ["--attention.mask", "sink_window", "--attention.window", w, "--attention.sink_tokens", "4"],
            "chunked": ["--attention.mask", "chunked", "--attention.block_size", b],
            "prefix_lm": ["--attention.mask", "prefix_lm", "--data.prefix_fraction", "0.25"],
            "shared_question": ["--attention.mask", "shared_question", "--data.prefix_fraction", "0.2",
                                "--data.answers_per_question", "3"],
            # LongCA-bench's masks that read ahead: benchmarks only (lct train refuses them)
            "full_document": ["--attention.mask", "full_document"],
            "bidirectional_window": ["--attention.mask", "bidirectional_window", "--attention.window", w],
            "causal_blockwise": ["--attention.mask", "causal_blockwise", "--attention.block_size", b],
            # MoBA's trainable block-sparse attention: blocks of 1/16 of the kernel's
            # document, 3 selected (scripts/experiments/block_sparse.py: quality and length)
            "block_sparse": ["--attention.mask", "block_sparse", "--attention.block_size", "64" if quick else "1024",
                             "--attention.top_blocks", "3"]}


# the masks lct train refuses (a query reads the token it predicts)
BENCH_ONLY = ("full_document", "bidirectional_window", "causal_blockwise")
# content-dependent masks: their exchanges move what the content selects, which lct
# simulate cannot price (the exchange part skips them)
CONTENT_DEPENDENT = ("block_sparse",)


def bench(args, quick, config, out):
    return json.loads(common.lct(["bench", "--json", "--sections", "attention", "--attention-precisions", "fp32",
                                  "--repeats", "1" if quick else "3", "--budget", "2" if quick else "20"] + args +
                                 common.ceilings(quick, config, out), quick, config))


LAYOUTS = {"one rank": (1, []),
           "cp=2 ring": (2, ["--parallel.dp", "1", "--parallel.cp", "2", "--parallel.cp_comm", "ring"]),
           "cp=2 allgather": (2, ["--parallel.dp", "1", "--parallel.cp", "2", "--parallel.cp_comm", "allgather"]),
           "cp=2 ulysses": (2, ["--parallel.dp", "1", "--parallel.cp", "2", "--parallel.cp_comm", "ulysses"]),
           "CAD dp=2": (2, ["--parallel.dp", "2", "--attention.placement", "cad"])}


def main():
    a = common.arguments(NAME, __doc__.splitlines()[0])
    masks = mask_args(a.quick)
    kernel_tokens = "1024" if a.quick else "16384"
    rows = []
    # 1. the kernel, per mask, one document and a packed batch of the same tokens
    for mask, extra in masks.items():
        b = bench(["--attention-lengths", kernel_tokens, "--data.doc_lengths", "pretrain", "--data.max_doc_len", kernel_tokens,
                   "--data.seq_len", kernel_tokens] + extra, a.quick, a.config, a.out)
        gemm = b["ceilings"]["fp32_gemm_gflops"]
        for r in b["attention"]["rows"]:
            if r["kernel"].startswith("dca"):
                continue
            rows.append({"part": "kernel", "mask": mask, "layout": r["layout"], "tokens": r["tokens"], "pairs": r["pairs"],
                         "fwd_bwd_ms": r["fwd_ms"] + r["bwd_ms"], "fwd_gflops": r["fwd_gflops"], "bwd_gflops": r["bwd_gflops"],
                         "fwd_bwd_vs_gemm": r["fwd_bwd_vs_fp32_gemm"], "fwd_bwd_vs_fma": r["fwd_bwd_vs_fma"],
                         "gemm_gflops": gemm})
    # 2. a sliding window of W on one document of T = W, 4 W and 16 W tokens: time per
    #    token stays flat (linear in T); causal documents of W and 2 W tokens beside it
    W = 256 if a.quick else 4096
    lengths = [str(W * k) for k in (1, 4, 16)]
    for mask, extra in (("sliding_window", ["--attention.mask", "sliding_window", "--attention.window", str(W)]), ("causal", [])):
        b = bench(["--attention-lengths"] + (lengths if mask != "causal" else [str(W), str(2 * W)]) + extra, a.quick, a.config, a.out)
        for r in b["attention"]["rows"]:
            if r["layout"] != "one-doc" or r["kernel"].startswith("dca"):
                continue
            rows.append({"part": f"length (W {W})", "mask": mask, "layout": "one-doc", "tokens": r["tokens"], "pairs": r["pairs"],
                         "fwd_bwd_ms": r["fwd_ms"] + r["bwd_ms"], "fwd_gflops": r["fwd_gflops"], "bwd_gflops": r["bwd_gflops"],
                         "fwd_bwd_vs_gemm": r["fwd_bwd_vs_fp32_gemm"], "fwd_bwd_vs_fma": r["fwd_bwd_vs_fma"],
                         "gemm_gflops": b["ceilings"]["fp32_gemm_gflops"],
                         "us_per_token": 1e3 * (r["fwd_ms"] + r["bwd_ms"]) / r["tokens"]})
    # 3. what the exchanges move per mask: every rank's bytes of one step over one
    #    document split 4 ways (cp = 4: the ring, the all-gather, the double ring 2 x 2),
    #    as lct simulate counts them (exactly what lct train sends: tests/parallel/mpi_step_model.sh),
    #    against the same layout under causal, and issue 58's bound (W + T / cp) / T
    T = 4096 if a.quick else 65536
    cp = 4
    one_doc = ["--data.doc_lengths", "fixed", "--data.min_doc_len", str(T), "--data.max_doc_len", str(T)]
    packed = ["--data.doc_lengths", "pretrain", "--data.max_doc_len", str(T)]  # the packer's per-document data

    def sent_bytes(comm, doc, extra):
        inner = ["--parallel.cp_inner_ring", "2"] if comm == "double_ring" else []
        # analytic costs (--tflops): only the bytes are read, and they do not depend on time
        text = common.lct(["simulate", "--json", "--ranks", str(cp), "--parallel.dp", "1", "--parallel.cp", str(cp),
                           "--parallel.cp_comm", comm, "--data.seq_len", str(T), "--steps", "1", "--tflops", "1"]
                          + inner + doc + extra, a.quick, a.config)
        return json.loads(text.strip().splitlines()[-1])["steps"][0]["rank_exchange_bytes"]

    causal_bytes = {}
    for mask, extra in masks.items():
        if mask in CONTENT_DEPENDENT:
            continue
        doc = packed if mask in ("prefix_lm", "shared_question") else one_doc
        for comm in ("ring", "allgather", "double_ring"):
            if (comm, doc[1]) not in causal_bytes:
                causal_bytes[(comm, doc[1])] = sent_bytes(comm, doc, [])
            base = causal_bytes[(comm, doc[1])]
            sent = base if mask == "causal" else sent_bytes(comm, doc, extra)
            # the bound of a causal window of W keys (issue 58)
            window = int(extra[extra.index("--attention.window") + 1]) if mask in ("sliding_window", "sink_window") else None
            data = "one document" if doc is one_doc else "pretrain mix"
            rows.append({"part": f"exchange T {T} cp {cp}", "mask": mask, "layout": f"cp={cp} {comm} ({data})", "tokens": T,
                         "mib_sent_per_rank_step": max(sent) / 2**20,
                         "vs_causal": max(x / c for x, c in zip(sent, base)) if all(base) else "",
                         "bound": (window + T / cp) / T if window else ""})
    # 4. training steps: every layout with every mask, alternating rounds (--quick: causal
    #    and the sliding window, enough for the table and the figure; tests/parallel/mpi_masks.sh
    #    runs every mask on every layout)
    step_masks = {m: masks[m] for m in (("causal", "sliding_window") if a.quick else masks) if m not in BENCH_ONLY}
    seq = "512" if a.quick else "8192"
    steps = "4" if a.quick else "6"
    rounds = 1 if a.quick else 2
    data = ["--data.doc_lengths", "pretrain", "--data.seq_len", seq, "--data.max_doc_len", seq, "--train.micro_batches", "1",
            "--train.steps", steps, "--attention.cad_profile", "pairs"]
    tps = {}
    for r in range(rounds):
        for mask, extra in step_masks.items():
            for layout, (ranks, largs) in LAYOUTS.items():
                run = common.mpi_train(ranks, data + extra + largs, a.quick, a.config,
                                       os.path.join(a.out, f"run_{mask}_{layout.replace(' ', '_').replace('=', '')}_{r}"))
                tps.setdefault((mask, layout), []).append((common.wall_clock(run, warmup=2)["tokens_per_s"], run))
    for mask in step_masks:
        for layout in LAYOUTS:
            if (mask, layout) not in tps:
                continue
            speedups = [t / tps[(mask, "one rank")][i][0] for i, (t, _) in enumerate(tps[(mask, layout)])]
            last = tps[(mask, layout)][-1][1][-1]
            rows.append({"part": "step", "mask": mask, "layout": layout, "tokens": int(seq),
                         "tokens_per_s": statistics.median(t for t, _ in tps[(mask, layout)]),
                         "speedup_over_one_rank": statistics.median(speedups),
                         "speedup_spread": f"{min(speedups):.3f}-{max(speedups):.3f}",
                         "compute_max_over_mean": last.get("compute_max_over_mean", ""),
                         "pairs_max_over_mean": last.get("attention_pairs_served_max_over_mean",
                                                         last.get("attention_pairs_max_over_mean", "")),
                         # the busiest rank's bytes and the exchange's exposed share, medians over the measured steps
                         "mib_sent_per_rank_step": statistics.median(max(m.get("rank_exchange_bytes", [0])) / 2**20
                                                                     for m in tps[(mask, layout)][-1][1][2:]),
                         "exchange_exposed_pct": 100 * statistics.median(m.get("exchange_exposed_fraction", 0)
                                                                          for m in tps[(mask, layout)][-1][1][2:])})
    columns = ["part", "mask", "layout", "tokens", "pairs", "fwd_bwd_ms", "fwd_gflops", "bwd_gflops", "fwd_bwd_vs_gemm",
               "fwd_bwd_vs_fma", "gemm_gflops", "us_per_token", "tokens_per_s", "speedup_over_one_rank", "speedup_spread",
               "compute_max_over_mean", "pairs_max_over_mean", "mib_sent_per_rank_step", "vs_causal", "bound",
               "exchange_exposed_pct"]
    settings = ", ".join(m + "".join(f" {k.split('.')[-1]} {v}" for k, v in zip(x[2::2], x[3::2])) for m, x in masks.items())
    print(common.write_outputs(a.out, NAME, rows, columns, "Attention masks: kernel, length and step throughput",
                               f"Masks: {settings}. GFLOP/s count only the pairs a mask lets through; ratios are to the "
                               f"same run's faster fp32 GEMM library and FMA loop. Steps: {seq}-token sequences of the pretrain mix, {rounds} alternating "
                               f"round(s) of {steps} steps (throughput of the steps after the first two), speedups over one "
                               f"rank with the same mask (medians and spread over rounds); CAD balances attention pairs. Exchange: "
                               f"the busiest rank's bytes of one step of a {T}-token sequence split over {cp} ranks (one "
                               f"document, or pretrain documents for the per-document masks), as lct simulate counts them (what lct train sends, "
                               f"exactly), the largest ratio of a rank's bytes to its bytes under causal, and (W + T/cp)/T."))
    fig, ax = common.subplots(1, 3, figsize=(16, 4.4))
    kern = [r for r in rows if r["part"] == "kernel"]
    names = list(masks)
    for j, layout in enumerate(["one-doc", "packed"]):
        v = [next(r["fwd_bwd_vs_gemm"] for r in kern if r["mask"] == m and r["layout"] == layout) for m in names]
        ax[0].bar([i + (j - 0.5) * 0.38 for i in range(len(names))], v, 0.38, color=f"C{j}", label=layout)
    ax[0].set_xticks(range(len(names)))
    ax[0].set_xticklabels(names, rotation=15)
    ax[0].set_ylabel("fwd+bwd GFLOP/s (unmasked pairs) / fp32 GEMM")
    ax[0].set_title(f"kernel, {kernel_tokens} tokens")
    ax[0].legend()
    ax[0].grid(alpha=0.3, axis="y")
    length = [r for r in rows if r["part"].startswith("length")]
    for mask, style in (("sliding_window", "o-"), ("causal", "s--")):
        pts = [(r["tokens"], r["us_per_token"]) for r in length if r["mask"] == mask]
        ax[1].plot([p[0] for p in pts], [p[1] for p in pts], style, label=mask)
    ax[1].set_xscale("log", base=2)
    ax[1].set_xlabel("tokens in the document")
    ax[1].set_ylabel("fwd+bwd microseconds per token")
    ax[1].set_title(f"sliding window W = {W}: linear in T")
    ax[1].legend()
    ax[1].grid(alpha=0.3)
    step = [r for r in rows if r["part"] == "step" and r["layout"] != "one rank"]
    layouts = [l for l in LAYOUTS if l != "one rank"]
    width = 0.8 / len(step_masks)
    for j, mask in enumerate(step_masks):
        v = [next((r["speedup_over_one_rank"] for r in step if r["mask"] == mask and r["layout"] == l), 0)
             for l in layouts]  # 0: a layout that refuses the mask
        ax[2].bar([i + (j - (len(step_masks) - 1) / 2) * width for i in range(len(layouts))], v, width, color=f"C{j}", label=mask)
    ax[2].set_xticks(range(len(layouts)))
    ax[2].set_xticklabels(layouts, rotation=15)
    ax[2].axhline(2.0, color="k", lw=0.8, ls="--")
    ax[2].set_ylabel("speedup over one rank (same mask)")
    ax[2].set_title(f"training step, pretrain mix, {seq} tokens")
    ax[2].legend(fontsize=8)
    ax[2].grid(alpha=0.3, axis="y")
    common.save_figure(fig, a.out, NAME)


if __name__ == "__main__":
    main()
