#!/usr/bin/env python3
"""Pass-key retrieval beyond the trained length (ChunkLlama, arXiv 2402.17463, Fig. 1 and
Table 4; the "needle" heat map of LongLoRA and others), per recipe and seed.

A byte-level model taught to copy on `copy` documents (until its induction circuit has
formed: the copy loss below 2 nats/byte; exported, so that each recipe starts from its
weights with its own attention settings and a fresh optimizer: train.init_from) is
trained on pass-key documents of every length up to L tokens (data.source = passkey) by
each recipe, from each seed, until its retrieval has formed (a second phase change: the
training retrieval accuracy jumps from 0.1, a guessed digit, to above 0.9, after a number
of steps that varies with the seed: 1,500 steps, then rounds of 500 up to 4,500) and then
1,000 steps past the step it formed at (consolidation: run C's recipe-seeds stopped
within 200 steps of forming extrapolated far worse than those 700 to 1,000 steps past
it), and evaluated without retraining on 50 documents of each of 1, 2, 4, 8 and 16 x L, 10 with
the key line at each depth 0, 25, 50, 75 and 100 %:

  causal      trained with causal attention; evaluated under
                causal    plain RoPE: distances up to 16 L were never seen in training
                dca       Dual Chunk Attention applied at evaluation only: C = L - 1,
                          w = L / 8, logits scaled by 0.1 ln(length / L) + 1
                dca+logn_beyond  the same with Qwen's logn attention added at evaluation
                          only (logits times max(1, ln n / ln L) for a query's n keys)
                linear    position interpolation (factor k at k x L), with --rope-kernels
                dynamic   NTK-aware scaling of the base from the document's length, with
                          --rope-kernels
                yarn      YaRN (factor k at k x L, original length L), with --rope-kernels
  dca_trained trained with DCA (C = L / 4, w = L / 32: every training document of more
              than C + 1 tokens meets successive- and inter-chunk keys, up to 4 chunks);
              evaluated under its own DCA and under causal attention
  logn        trained with causal attention and attention.logit_scaling = logn (L): each
              query's logits times ln(n) / ln(L) for its n keys; evaluated under causal
              and DCA (as the causal recipe's), both with the factor; only when named in
              --recipes (run C measured it: docs/reproducing-papers.md) or with --quick
  dca_logn    both: trained with DCA (C = L / 4) and logn
  dca_logn_wide  capacity: dca_logn with a model twice as wide, four heads of the same
              32 dimensions (its own copy warm-up); only when named in --recipes
  block_sparse  trained with attention.mask = block_sparse (MoBA: blocks of L / 16, each
              query its own block and the 2 earlier blocks its mean query selects);
              evaluated under its own mask (does the selection find the key line's
              block?) and under causal attention; only when named in --recipes

A document counts as retrieved when `lct generate` (greedy, KV cache) writes its five
digits after the question, as ChunkLlama scores it (generated_accuracy), and, beside it,
when every digit is the argmax given the digits before it (teacher-forced: accuracy;
digit_recall the share of digits that are; loss the answer's nats per digit). Both come
from one lct generate run per (checkpoint, kernel, length) and one forward of each
prompt (--continuation-tokens: the generation, then the answer by teacher forcing from
the same KV cache). The two agree by construction (greedy decoding writes the argmax
digit after digit, and both take the length-dependent settings from the document of
prompt + answer); a difference would be a near-tie of two digits' logits.
Each length is one batch and one lct generate run
per kernel. Each cell is reported per seed (CSV, with the pass-key steps the seed's
recipe took and its final training retrieval accuracy) and as the median and range over
seeds (markdown, plot). With --kv, key-value retrieval recall (data.source = synthetic, a
model trained from the same copy warm-up on documents of L/4 to L tokens) is measured
for the causal recipe. scripts/experiments/passkey_attention.py follows a checkpoint's
answer rows through its attention (the share on the key line).

  /usr/bin/python3 scripts/experiments/passkey.py [--quick] [--out DIR] [--config F]
      [--seeds 3] [--recipes causal,dca_trained,dca_logn] [--jobs 2] [--kv]
      [--rope-kernels] [--summarize]
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import statistics
import sys
import time

import common

NAME = "passkey"
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
COLUMNS = ["recipe", "seed", "task", "kernel", "length_factor", "length", "depth", "documents", "accuracy",
           "generated_accuracy", "digit_recall", "loss", "train_steps", "train_retrieval", "formed_step"]

# The model and schedule are the ones measured to learn retrieval within this
# experiment's budget (docs/reproducing-papers.md): a 2-layer, 64-wide model with two
# 32-dimensional heads, first taught to copy from context on `copy` documents (its
# induction circuit forms abruptly, at a step that varies with the seed: 900 to more than
# 2,000 steps of 16 documents, 6,000 to 8,000 of 4 documents; hence the gated warm-up),
# then trained on pass keys of every length from the shortest layout to L (trained at one
# fixed length, the model leans on where its documents end and fails right after L).
# Retrieval forms abruptly too: in two runs of 3,000 fixed steps, 5 of 12 recipe-seeds
# were still at 0.1 training accuracy (a guessed digit) and one formed at step 2,750;
# hence the gated pass-key phase.
COPY_FORMED = 2.0         # nats/byte: the copy warm-up's induction circuit has formed
RETRIEVAL_FORMED = 0.9    # training retrieval accuracy: the pass-key phase change has happened
MAX_WARMUP_ROUNDS = 6
WARMUP_SEQ_LEN = 1024     # 4 documents of 256 bytes a warm-up step
PASSKEY_MIN_LENGTH = 179  # passkey_min_length(): the layout without filler
MODEL = ["--model.hidden_size", "64", "--model.intermediate_size", "172", "--model.num_hidden_layers", "2",
         "--model.num_attention_heads", "2", "--model.num_key_value_heads", "2"]
# capacity: twice the width, four heads of the same 32 dimensions (its own copy warm-up)
WIDE = ["--model.hidden_size", "128", "--model.intermediate_size", "344", "--model.num_hidden_layers", "2",
        "--model.num_attention_heads", "4", "--model.num_key_value_heads", "4"]
MODELS = {"small": MODEL, "wide": WIDE}


def dca_settings(chunk, local, L):
    return ["--attention.kernel", "dca", "--attention.dca_chunk_size", str(chunk), "--attention.dca_local_size",
            str(local), "--attention.dca_mscale_original_length", str(L)]


def logn(kind, L):
    return ["--attention.logit_scaling", kind, "--attention.logit_scaling_length", str(L)]


class Recipe:
    """How a recipe trains its pass-key model (attention settings over the copy model's
    weights) and the overrides each of its evaluation kernels gives lct eval / generate at
    k x L."""

    def __init__(self, name, train_args, kernels, model="small"):
        self.name, self.train_args, self.kernels, self.model = name, train_args, kernels, model


def recipes(L, rope_kernels=False):
    eval_dca = lambda k: dca_settings(L - 1, L // 8, L)  # DCA at evaluation only

    def scaled(kernel, k):
        if kernel == "causal" or (kernel in ("linear", "yarn") and k == 1):
            return []
        factor = "1" if kernel == "dynamic" else str(k)
        return ["--model.rope_scaling", kernel, "--model.rope_scaling_factor", factor,
                "--model.rope_original_length", str(L)]

    # the causal recipe's checkpoint under DCA with Qwen's clamped logn added at
    # evaluation only (dca+logn_beyond), beside the recipes that train logn in
    causal_kernels = {"causal": lambda k: [], "dca": eval_dca,
                      "dca+logn_beyond": lambda k: eval_dca(k) + logn("logn_beyond", L)}
    for kernel in (("linear", "dynamic", "yarn") if rope_kernels else ()):
        causal_kernels[kernel] = (lambda kern: lambda k: scaled(kern, k))(kernel)
    trained_dca = dca_settings(L // 4, L // 32, L)
    own_and_causal = {"causal": lambda k: ["--attention.kernel", "causal"], "dca": lambda k: []}
    return {
        "causal": Recipe("causal", [], causal_kernels),
        "dca_trained": Recipe("dca_trained", trained_dca, own_and_causal),
        "logn": Recipe("logn", logn("logn", L), {"causal": lambda k: [], "dca": eval_dca}),
        "dca_logn": Recipe("dca_logn", trained_dca + logn("logn", L), own_and_causal),
        "dca_logn_wide": Recipe("dca_logn_wide", trained_dca + logn("logn", L), own_and_causal, "wide"),
        # MoBA: blocks of L / 16, two selected (a query reads at most 3 L / 16 keys): does
        # the selection find the key line's block? Under its own mask and under causal
        "block_sparse": Recipe("block_sparse", ["--attention.mask", "block_sparse", "--attention.block_size",
                                                str(L // 16), "--attention.top_blocks", "2"],
                               {"causal": lambda k: ["--attention.mask", "causal"], "block_sparse": lambda k: []}),
    }


KERNEL_ORDER = ("causal", "dca", "dca+logn_beyond", "linear", "dynamic", "yarn", "block_sparse")


def train(a, out_dir, args, steps, seed, model, init_from=None, resume=None, seq_len=4096):
    """Trains up to step `steps` at a constant learning rate, from scratch, from the weights
    of the Hugging Face folder `init_from` (attention settings are the run's own: a causal
    model continues under DCA or logit scaling), or resuming the checkpoint `resume`;
    returns the last checkpoint."""
    common.lct(["train", "--checkpoint.dir", out_dir, "--checkpoint.overwrite", "false" if resume else "true",
                "--checkpoint.keep", "1", "--train.log_every", "100", "--train.steps", str(steps),
                "--checkpoint.every", str(steps), "--train.warmup_steps", "30", "--train.lr", "0.002",
                "--train.min_lr", "0.002", "--data.seq_len", str(seq_len), "--train.seed", str(seed), "--train.threads",
                str(a.threads)] + MODELS[model] + args + (["--train.init_from", init_from] if init_from else []) +
               (["--train.resume", resume] if resume else []), False, a.config)
    return sorted(glob.glob(os.path.join(out_dir, "step_*.h5")))[-1]


def evaluate(a, ckpt, batch, overrides):
    text = common.lct(["eval", "--checkpoint", ckpt, "--batch-file", batch, "--threads", str(a.threads)] + overrides,
                      False, a.config)
    loss = float(re.search(r"loss (\S+)", text).group(1))
    recall = float(re.search(r"recall (\S+)", text).group(1))
    m = re.search(r"answered (\S+) \((\d+) of (\d+) documents\)", text)
    return loss, recall, float(m.group(1)), int(m.group(3))


def answer_scores(a, ckpt, batch, overrides):
    """Each document of the batch up to its answer is a prompt (one a line, token ids) and
    its answer the continuation: one lct generate run writes the greedy continuation (KV
    cache) and, from the same prompt forward, scores the answer by teacher forcing
    (--continuation-tokens). Returns per document (generated: 1 when the continuation
    written is the key, teacher-forced: 1 when every answer digit is the argmax given the
    digits before it, digits right, digits, answer log-likelihood in nats)."""
    import h5py  # the experiments' Python has it (Debian python3-h5py)
    prompts, answers = [], []
    with h5py.File(batch) as f:
        tokens, cu, mask = f["tokens"][...], f["cu_seqlens"][...], f["answer_mask"][...]
    for d in range(len(cu) - 1):
        rows = [t for t in range(cu[d], cu[d + 1]) if mask[t]]
        first = rows[0] + 1  # the first answer token (mask marks the rows predicting one)
        prompts.append(" ".join(str(t) for t in tokens[cu[d]:first]))
        answers.append([int(t) for t in tokens[first:cu[d + 1]]])
    base = batch + f".{os.getpid()}"
    with open(base + ".prompts", "w") as f:
        f.write("\n".join(prompts) + "\n")
    with open(base + ".answers", "w") as f:
        f.write("\n".join(" ".join(map(str, x)) for x in answers) + "\n")
    text = common.lct(["generate", "--checkpoint", ckpt, "--prompt-tokens", base + ".prompts", "--continuation-tokens",
                       base + ".answers", "--per-line", "--json", "--threads", str(a.threads)] + overrides, False,
                      a.config)
    os.remove(base + ".prompts")
    os.remove(base + ".answers")
    lines = [json.loads(line) for line in text.strip().splitlines()]
    assert len(lines) == len(answers)
    return [(int(j["tokens"] == x), int(j["continuation_greedy"]), j["continuation_argmax"], j["continuation_tokens"],
             j["continuation_log_likelihood"]) for j, x in zip(lines, answers)]


def merge_batches(paths, out):
    """One batch file of the documents of `paths` in their order (tokens, cu_seqlens,
    answer_mask, as lct make-batch writes them)."""
    import h5py
    import numpy as np
    tokens, cu, mask, seq_len = [], [0], [], 0
    for path in paths:
        with h5py.File(path) as f:
            tokens.append(f["tokens"][...])
            mask.append(f["answer_mask"][...])
            cu += [c + cu[-1] for c in f["cu_seqlens"][1:]]
            seq_len = int(f.attrs["seq_len"])
    with h5py.File(out + ".tmp", "w") as f:
        f["tokens"] = np.concatenate(tokens).astype(np.int32)
        f["cu_seqlens"] = np.asarray(cu, dtype=np.int32)
        f["answer_mask"] = np.concatenate(mask).astype(np.int32)
        f.attrs["source"] = f"pass-key retrieval, {len(paths)} depths merged"
        f.attrs["first_sequence"] = 0
        f.attrs["seq_len"] = seq_len
    os.replace(out + ".tmp", out)


def passkey_batches(a, L, factors, per_depth):
    """The evaluation documents, the same for every recipe and seed: per length k x L one
    batch of per_depth documents at each depth (depth after depth; fixed seed 99, each
    depth its own stretch of the stream, so its own keys). Returns {k: (path, [depth of
    each document])}, and {k: key-value batch} under "kv"."""
    fixed = lambda n: ["--data.doc_lengths", "fixed", "--data.min_doc_len", str(n), "--data.max_doc_len", str(n)]
    batches, kv = {}, {}
    for k in factors:
        n = k * L
        parts = []
        for i, depth in enumerate(a.depths):
            path = os.path.join(a.out, "batches", f"passkey_{n}_{int(depth * 100)}.h5")
            common.lct(["make-batch", "--data.source", "passkey"] + fixed(n) +
                       ["--data.seq_len", str(n), "--data.passkey_depth", str(depth), "--sequences", str(per_depth),
                        "--first", str(i * per_depth), "--train.seed", "99", "--out", path], False, a.config)
            parts.append(path)
        path = os.path.join(a.out, "batches", f"passkey_{n}.h5")
        merge_batches(parts, path)
        for part in parts:
            os.remove(part)
        batches[k] = (path, [d for d in a.depths for _ in range(per_depth)])
        if a.kv:
            path = os.path.join(a.out, "batches", f"retrieval_{n}.h5")
            common.lct(["make-batch", "--data.source", "synthetic"] + fixed(n) +
                       ["--data.seq_len", str(n), "--sequences", str(per_depth * 2), "--train.seed", "99",
                        "--out", path], False, a.config)
            kv[k] = path
    return batches, kv


def score(a, ckpt, batch, depths, overrides):
    """Scores a checkpoint on one merged pass-key batch under `overrides` (answer_scores:
    one lct generate run). Returns {depth: (documents, teacher-forced answered, generated
    answered, digits right, digits, minus the answers' log-likelihood)}."""
    out = {}
    scored = answer_scores(a, ckpt, batch, overrides)
    assert len(scored) == len(depths)
    for (gen, tf, right, digits, ll), depth in zip(scored, depths):
        n, tf_sum, gen_sum, right_sum, digit_sum, loss = out.get(depth, (0, 0, 0, 0, 0, 0.0))
        out[depth] = (n + 1, tf_sum + tf, gen_sum + gen, right_sum + right, digit_sum + digits, loss - ll)
    return out


def copy_loss(out_dir, last=50):
    """The mean training loss of a run's last `last` steps (metrics.jsonl)."""
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    losses = [r["loss"] for r in rows if "loss" in r][-last:]
    return sum(losses) / len(losses)


def warmup_job(a, seed, model, schedule):
    """One seed's copy warm-up: 4 documents of 256 bytes a step, in rounds of
    schedule[0] steps until the induction circuit has formed (the copy loss below
    COPY_FORMED nats/byte over the last 50 steps; it falls abruptly from about 5.3 when it
    forms, after a number of steps that varies with the seed), at most MAX_WARMUP_ROUNDS
    rounds; exported as the Hugging Face folder every recipe of that model starts from.
    Returns (folder, steps, final copy loss)."""
    root = os.path.join(a.out, f"seed{seed}")
    suffix = "" if model == "small" else "_" + model
    out = os.path.join(root, "copy_model" + suffix)
    copy = ["--data.source", "copy", "--data.doc_lengths", "fixed", "--data.min_doc_len", "256",
            "--data.max_doc_len", "256"]
    steps = schedule[0]
    ckpt = train(a, out, copy, steps, seed, model, seq_len=WARMUP_SEQ_LEN)
    rounds = 1
    while copy_loss(out) > COPY_FORMED and rounds < MAX_WARMUP_ROUNDS and not a.quick:
        steps += schedule[0]
        ckpt = train(a, out, copy, steps, seed, model, resume=ckpt, seq_len=WARMUP_SEQ_LEN)
        rounds += 1
    folder = os.path.join(root, "copy_model" + suffix + "_hf")
    common.lct(["export", "--checkpoint", ckpt, "--out", folder], False, a.config)
    print(f"  seed {seed}: {model} copy warm-up {steps} steps, loss {copy_loss(out):.2f}", file=sys.stderr,
          flush=True)
    return folder, steps, copy_loss(out)


def retrieval_formed(out_dir, last=100):
    """The mean training retrieval accuracy (answer digits whose argmax is right) of a
    run's last `last` steps (metrics.jsonl)."""
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    acc = [r["retrieval_acc"] for r in rows if r.get("retrieval_acc") is not None][-last:]
    return sum(acc) / len(acc) if acc else 0.0


def formed_at(out_dir, last=100):
    """The step at which the run's retrieval formed: the first whose last `last` steps'
    mean training retrieval accuracy reaches RETRIEVAL_FORMED (metrics.jsonl); None
    before."""
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    acc = [(r["step"], r["retrieval_acc"]) for r in rows if r.get("retrieval_acc") is not None]
    total = sum(a for _, a in acc[:last])
    for i in range(last, len(acc) + 1):
        if i > last:
            total += acc[i - 1][1] - acc[i - 1 - last][1]
        if total / last >= RETRIEVAL_FORMED:
            return acc[i - 1][0]
    return None


def train_passkey(a, out, args, seed, model, copied, L, schedule):
    """Trains a recipe's pass-key model from the seed's copy model: schedule[1] steps, then
    rounds of schedule[2] steps until its retrieval has formed (formed_at), up to
    schedule[3] steps; then, once formed, up to schedule[4] steps past the formation step
    (consolidation: in run C, the recipe-seeds stopped within 200 steps of forming
    extrapolated far worse than those trained 700 to 1,000 steps past it). Returns
    (checkpoint, steps, final training retrieval accuracy, formation step or None)."""
    passkey = ["--data.source", "passkey", "--data.doc_lengths", "uniform", "--data.min_doc_len",
               str(PASSKEY_MIN_LENGTH), "--data.max_doc_len", str(L)]
    steps = schedule[1]
    ckpt = train(a, out, passkey + args, steps, seed, model, copied)
    formed = formed_at(out)
    while formed is None and steps < schedule[3] and not a.quick:
        steps = min(steps + schedule[2], schedule[3])
        ckpt = train(a, out, passkey + args, steps, seed, model, resume=ckpt)
        formed = formed_at(out)
    if formed is not None and formed + schedule[4] > steps:
        steps = formed + schedule[4]
        ckpt = train(a, out, passkey + args, steps, seed, model, resume=ckpt)
    return ckpt, steps, retrieval_formed(out), formed


def recipe_job(a, seed, name, copied, L, factors, batches, schedule):
    """Trains recipe `name` from the seed's copy model and scores it under its kernels."""
    r = recipes(L, a.rope_kernels)[name]
    ckpt, steps, accuracy, formed = train_passkey(a, os.path.join(a.out, f"seed{seed}", name), r.train_args, seed,
                                                  r.model, copied, L, schedule)
    rows = []
    for k in factors:
        path, depths = batches[k]
        for kernel, overrides in r.kernels.items():
            for depth, (n, tf, gen, right, answers, loss) in sorted(score(a, ckpt, path, depths,
                                                                         overrides(k)).items()):
                rows.append({"recipe": name, "seed": seed, "task": "passkey", "kernel": kernel,
                             "length_factor": k, "length": k * L, "depth": depth, "documents": n,
                             "accuracy": tf / n, "generated_accuracy": gen / n, "digit_recall": right / answers,
                             "loss": round(loss / answers, 6), "train_steps": steps,
                             "train_retrieval": round(accuracy, 4),
                             "formed_step": "" if formed is None else formed})
    print(f"  seed {seed}: {name} trained ({steps} steps, retrieval {accuracy:.2f}, formed at {formed}) and scored",
          file=sys.stderr,
          flush=True)
    return rows


def kv_job(a, seed, copied, L, factors, batches, schedule):
    """Key-value retrieval (synthetic) from the same copy model, under the causal recipe's
    kernels (queries ask for the keys of the document's start: depth 0)."""
    ckpt = train(a, os.path.join(a.out, f"seed{seed}", "retrieval_model"),
                 ["--data.source", "synthetic", "--data.doc_lengths", "uniform", "--data.min_doc_len", str(L // 4),
                  "--data.max_doc_len", str(L)], schedule[1], seed, "small", copied)
    rows = []
    for k in factors:
        for kernel, overrides in recipes(L, a.rope_kernels)["causal"].kernels.items():
            loss, recall, acc, count = evaluate(a, ckpt, batches[k], overrides(k))
            rows.append({"recipe": "causal", "seed": seed, "task": "kv_retrieval", "kernel": kernel,
                         "length_factor": k, "length": k * L, "depth": 0.0, "documents": count,
                         "accuracy": recall, "generated_accuracy": float("nan"), "digit_recall": recall,
                         "loss": loss, "train_steps": schedule[1], "train_retrieval": retrieval_formed(
                             os.path.join(a.out, f"seed{seed}", "retrieval_model")), "formed_step": ""})
    return rows


def summarize(rows, factors, chosen):
    """Markdown: per recipe and kernel, median [min-max] over seeds of the generated pass-key
    accuracy (mean over depths) at each length, the teacher-forced one, and the loss."""
    def cell(recipe, kernel, k, field, task="passkey"):
        per_seed = {}
        for r in rows:
            if r["recipe"] == recipe and r["kernel"] == kernel and r["length_factor"] == k and r["task"] == task:
                per_seed.setdefault(r["seed"], []).append(r[field])
        vals = [statistics.mean(v) for v in per_seed.values()]
        return vals

    def fmt(vals):
        if not vals:
            return "-"
        med = statistics.median(vals)
        return f"{med:.2f}" if min(vals) == max(vals) else f"{med:.2f} [{min(vals):.2f}-{max(vals):.2f}]"

    def steps(recipe):
        per_seed = {r["seed"]: r for r in rows if r["recipe"] == recipe and r["task"] == "passkey"}
        if not all("train_steps" in r for r in per_seed.values()):
            return "-"
        def formed(r):
            f = r.get("formed_step", "")
            return "" if f in ("", None) else f", formed at {int(float(f))}"
        return ", ".join(f"{int(r['train_steps'])} ({r['train_retrieval']:.2f}{formed(r)})"
                         for _, r in sorted(per_seed.items()))

    head = " / ".join(f"{k}x" for k in factors)
    md = [f"| recipe | kernel | generated pass-key accuracy at {head} | teacher-forced | digit recall | "
          f"answer loss, nats/digit | pass-key steps per seed (training retrieval) |", "|---|---|---|---|---|---|---|"]
    for recipe in chosen:
        kernels = sorted({r["kernel"] for r in rows if r["recipe"] == recipe and r["task"] == "passkey"},
                         key=KERNEL_ORDER.index)
        for kernel in kernels:
            md.append(f"| {recipe} | {kernel} | " + " / ".join(
                fmt(cell(recipe, kernel, k, "generated_accuracy")) for k in factors) + " | " + " / ".join(
                fmt(cell(recipe, kernel, k, "accuracy")) for k in factors) + " | " + " / ".join(
                fmt(cell(recipe, kernel, k, "digit_recall")) for k in factors) + " | " + " / ".join(
                fmt(cell(recipe, kernel, k, "loss")) for k in factors) + " | " + steps(recipe) + " |")
    kv = [r for r in rows if r["task"] == "kv_retrieval"]
    if kv:
        md += ["", f"| key-value recall (causal recipe) | {head} |", "|---|---|"]
        for kernel in sorted({r["kernel"] for r in kv}, key=KERNEL_ORDER.index):
            md.append(f"| {kernel} | " + " / ".join(fmt(cell("causal", kernel, k, "accuracy", "kv_retrieval"))
                                                   for k in factors) + " |")
    return "\n".join(md)


def plot(a, rows, factors, chosen):
    """One heat map per (recipe, kernel): the median over seeds of the generated accuracy
    per (length, depth), with the range over seeds in each cell."""
    depths = sorted({r["depth"] for r in rows if r["task"] == "passkey"})
    panels = [(rec, ker) for rec in chosen for ker in KERNEL_ORDER
              if any(r["recipe"] == rec and r["kernel"] == ker and r["task"] == "passkey" for r in rows)]
    cols = min(4, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = common.subplots(nrows, cols, figsize=(3.4 * cols, 3.3 * nrows), squeeze=False, constrained_layout=True)
    im = None
    for i, (rec, ker) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        grid, text = [], []
        for d in depths:
            line, tline = [], []
            for k in factors:
                vals = [r["generated_accuracy"] for r in rows if r["recipe"] == rec and r["kernel"] == ker and
                        r["task"] == "passkey" and r["length_factor"] == k and r["depth"] == d]
                med = statistics.median(vals) if vals else float("nan")
                line.append(med)
                tline.append(f"{med:.2f}" + ("" if not vals or min(vals) == max(vals) else
                                             f"\n{min(vals):.1f}-{max(vals):.1f}"))
            grid.append(line)
            text.append(tline)
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
        ax.set_xticks(range(len(factors)), [f"{k}x" for k in factors])
        ax.set_yticks(range(len(depths)), [f"{int(d * 100)}%" for d in depths])
        ax.set_title(f"{rec}: {ker}", fontsize=9)
        ax.set_xlabel("length / trained length", fontsize=8)
        for y, line in enumerate(text):
            for x, t in enumerate(line):
                ax.text(x, y, t, ha="center", va="center", fontsize=6)
    for j in range(len(panels), nrows * cols):
        axes[j // cols][j % cols].axis("off")
    if im is not None:
        fig.colorbar(im, ax=axes, fraction=0.02)
    fig.suptitle(f"generated pass-key accuracy, median over {len({r['seed'] for r in rows})} seeds "
                 f"(range below)", fontsize=10)
    fig.savefig(os.path.join(a.out, f"{NAME}.png"), dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(common.ROOT, "results", NAME))
    p.add_argument("--quick", action="store_true", help="tiny schedule and lengths (for tests)")
    p.add_argument("--config", default=os.path.join(common.ROOT, "configs", "default.toml"))
    p.add_argument("--seeds", type=int, default=None, help="seeds per recipe (default 3; --quick 1)")
    p.add_argument("--recipes", default=None,
                   help="of causal, dca_trained, dca_logn, logn, dca_logn_wide, block_sparse (default "
                        "causal,dca_trained,dca_logn; "
                        "--quick also logn, so that every small-model recipe runs in the suite)")
    p.add_argument("--jobs", type=int, default=None,
                   help="recipes (of any seed) trained and scored at once, one thread each (default: cores)")
    p.add_argument("--rope-kernels", action="store_true",
                   help="also score the causal recipe under RoPE scaling: linear, dynamic and yarn")
    p.add_argument("--kv", action="store_true",
                   help="also train key-value retrieval models (causal recipe's kernels) from the copy models")
    p.add_argument("--summarize", action="store_true",
                   help="rewrite the markdown summary and the plot from OUT/passkey.csv (no training)")
    a = p.parse_args()
    if a.summarize:
        import csv
        with open(os.path.join(a.out, f"{NAME}.csv")) as f:
            rows = [{**r, "seed": int(r["seed"]), "length_factor": int(r["length_factor"]), "depth": float(r["depth"]),
                     **{c: float(r[c]) for c in ("accuracy", "generated_accuracy", "digit_recall", "loss")},
                     **{c: float(r[c]) for c in ("train_steps", "train_retrieval") if r.get(c)}}
                    for r in csv.DictReader(f)]
        chosen = list(dict.fromkeys(r["recipe"] for r in rows))
        factors = sorted({r["length_factor"] for r in rows})
        text = "## Pass-key retrieval per recipe\n\n" + summarize(rows, factors, chosen)
        with open(os.path.join(a.out, f"{NAME}.md"), "w") as f:
            f.write(text + "\n")
        print(text)
        plot(a, rows, factors, chosen)
        return
    if not os.access(common.LCT, os.X_OK):
        sys.exit(f"{NAME}: no lct binary at {common.LCT} (bash scripts/build.sh)")
    recipe_list = a.recipes or ("causal,dca_trained,logn,dca_logn" if a.quick else "causal,dca_trained,dca_logn")
    chosen = [r.strip() for r in recipe_list.split(",") if r.strip()]
    L = 256 if a.quick else 512
    known = recipes(L, a.rope_kernels)
    for r in chosen:
        if r not in known:
            sys.exit(f"{NAME}: unknown recipe '{r}' (known: {', '.join(known)})")
    seeds = list(range(a.seeds if a.seeds is not None else (1 if a.quick else 3)))
    jobs = max(1, a.jobs or os.cpu_count() or 1)
    a.threads = 1 if jobs > 1 else 0
    os.makedirs(os.path.join(a.out, "batches"), exist_ok=True)
    started = time.time()
    factors = [1, 2] if a.quick else [1, 2, 4, 8, 16]
    a.depths = (0.5,) if a.quick else DEPTHS
    per_depth = 2 if a.quick else 10          # documents per (length, depth): 50 per length
    # copy warm-up round; pass-key steps, then rounds of, up to, then steps past formation
    schedule = (10, 10, 10, 10, 10) if a.quick else (2000, 1500, 500, 4500, 1000)
    batches, kv_batches = passkey_batches(a, L, factors, per_depth)
    rows = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        models = sorted({known[r].model for r in chosen} | ({"small"} if a.kv else set()), reverse=True)
        pairs = [(seed, m) for m in models for seed in seeds]
        # a seed's recipes start as soon as its copy warm-up is done (the other core goes
        # on with the next warm-up), the causal recipe first (it scores the most kernels)
        pending = {pool.submit(warmup_job, a, seed, m, schedule): (seed, m) for seed, m in pairs}
        warm, jobs_list = {}, []
        for done in concurrent.futures.as_completed(pending):
            seed, m = pending[done]
            warm[(seed, m)] = done.result()
            jobs_list += [pool.submit(recipe_job, a, seed, name, warm[(seed, m)][0], L, factors, batches, schedule)
                          for name in chosen if known[name].model == m]
            if a.kv and m == "small":
                jobs_list.append(pool.submit(kv_job, a, seed, warm[(seed, m)][0], L, factors, kv_batches, schedule))
        for j in jobs_list:
            rows += j.result()
    rows.sort(key=lambda r: (chosen.index(r["recipe"]), r["seed"], r["task"], KERNEL_ORDER.index(r["kernel"]),
                             r["length_factor"], r["depth"]))
    elapsed = time.time() - started
    table = summarize(rows, factors, chosen)
    warm_text = ", ".join(f"seed {seed}{'' if m == 'small' else ' ' + m} {w[1]} steps (copy loss {w[2]:.2f})"
                          for (seed, m), w in sorted(warm.items()))
    notes = (f"Trained at L = {L}: a copy warm-up of 4 documents of 256 bytes a step, in rounds of {schedule[0]} "
             f"steps until the copy loss is below {COPY_FORMED} nats/byte ({warm_text}), then pass keys of every "
             f"length up to L per recipe: {schedule[1]} steps, then rounds of {schedule[2]} until the training "
             f"retrieval has formed (the mean accuracy of the last 100 steps reaches {RETRIEVAL_FORMED}), up to "
             f"{schedule[3]}, then up to {schedule[4]} steps past the formation step (steps, final training retrieval "
             f"and formation step per seed in the table), from {len(seeds)} seeds; evaluated from the same checkpoints without retraining "
             f"({per_depth} documents per depth and length: {per_depth * len(a.depths)} generated answers per "
             f"length); each cell: median [min-max] over seeds of the mean over {len(a.depths)} depths. generated = lct "
             f"generate writes the key (greedy, KV cache); teacher-forced = every digit the argmax given the digits before "
             f"it (the same lct generate run and prompt forward: --continuation-tokens); answer loss = minus the "
             f"answer's log-likelihood per digit. "
             f"ChunkLlama (Llama2 7B trained at 4K): DCA ~100% pass keys to 100K+, plain RoPE 0% beyond 4K. Elapsed "
             f"{elapsed:.0f} s with {jobs} job(s).")
    common.write_outputs(a.out, NAME, rows, COLUMNS, "Pass-key retrieval per recipe", notes)  # the CSV
    text = "## Pass-key retrieval per recipe: train at L, evaluate at 1-16x L and 5 depths\n\n" + table + "\n\n" + notes
    with open(os.path.join(a.out, f"{NAME}.md"), "w") as f:  # the summary, not the per-seed rows
        f.write(text + "\n")
    print(text)
    plot(a, rows, factors, chosen)


if __name__ == "__main__":
    main()
