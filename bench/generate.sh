#!/usr/bin/env bash
# lct generate's speed: the prompt's forward (prefill) and the new tokens (decode) by the
# wall clock, at several prompt lengths, causal and DCA, on the config's model (its
# weights from one training step: speed does not depend on what the weights are).
# Each (length, kernel) runs once per round, the rounds alternating; the figure is the
# median over rounds with the range beside it. GFLOP/s by lct's convention
# (src/train/flops.h; the LM head on the rows it runs on), set against the same run's
# fp32 GEMM ceiling (lct bench --sections ceilings).
#
#   bash bench/generate.sh [--config configs/default.toml] [--lengths "1024 8192 32768"]
#                          [--new 128] [--rounds 3] [--threads 2] [extra lct args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, $work, bench_options
# One process: OpenMP's default wait policy (common.sh sets PASSIVE for ranks that share
# cores). Under PASSIVE every parallel region wakes its sleeping threads, and a decoding
# step of a small model is dozens of tiny regions: docs/generation.md gives the cost.
unset OMP_WAIT_POLICY
bench_options "lengths new=128 rounds=3 threads=2" "$@"
LENGTHS=${LENGTHS:-"1024 8192 32768"}
set -- "${BENCH_REST[@]}"
KERNELS="causal dca"
declare -A ARGS=([causal]="" [dca]="--attention.kernel dca --attention.dca_chunk_size 2048 --attention.dca_local_size 256")

"$LCT" train --config "$CONFIG" --train.threads "$THREADS" --train.steps 1 --checkpoint.dir "$work/ck" "$@" > /dev/null
CK=$(ls "$work"/ck/step_*.h5 | tail -1)
for n in $LENGTHS; do
  python3 -c "import random; random.seed($n); print(' '.join(str(random.randrange(256)) for _ in range($n)))" > "$work/p$n.ids"
done
# once, outside the measurement: the machine's cached choices and the page cache
"$LCT" generate --checkpoint "$CK" --prompt-tokens "$work/p1024.ids" --max-new-tokens 4 --threads "$THREADS" \
  > /dev/null 2>&1 || true
ceiling=$("$LCT" bench --config "$CONFIG" --sections ceilings --json --train.threads "$THREADS" "$@" 2> /dev/null \
  | python3 -c "import json,sys; c=json.loads(sys.stdin.read().strip().splitlines()[-1])['ceilings']; print(max(c['sgemm_gflops'], c.get('onednn_f32_gflops') or 0))")
echo "lct generate | config $CONFIG | $ROUNDS rounds | $NEW new tokens | $THREADS threads | fp32 GEMM ceiling $ceiling GFLOP/s"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $("$LCT" train --config "$CONFIG" --dry-run "$@" 2> /dev/null | head -1 | cut -d'|' -f2)"
for r in $(seq "$ROUNDS"); do
  for n in $LENGTHS; do
    for k in $KERNELS; do
      # shellcheck disable=SC2086
      "$LCT" generate --checkpoint "$CK" --prompt-tokens "$work/p$n.ids" --max-new-tokens "$NEW" \
        --threads "$THREADS" --json ${ARGS[$k]} 2> /dev/null >> "$work/$n.$k.jsonl"
    done
  done
done
python3 - "$work" "$ceiling" "$LENGTHS" "$KERNELS" <<'PY'
import json, statistics, sys
work, ceiling, lengths, kernels = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
print("| prompt | kernel | prefill tokens/s (range) | prefill GFLOP/s | vs ceiling | decode tokens/s (range) | decode ms/token | decode GFLOP/s | vs ceiling |")
print("|---|---|---|---|---|---|---|---|---|")
for n in lengths:
    for k in kernels:
        runs = [json.loads(l) for l in open(f"{work}/{n}.{k}.jsonl")]
        pre = [r["prompt_tokens"] / r["prompt_seconds"] for r in runs]
        dec = [r["new_tokens"] / r["decode_seconds"] for r in runs]
        pre_gf = statistics.median(r["prompt_gflop"] / r["prompt_seconds"] for r in runs)
        dec_gf = statistics.median(r["decode_gflop"] / r["decode_seconds"] for r in runs)
        mp, md = statistics.median(pre), statistics.median(dec)
        print(f"| {n} | {k} | {mp:.0f} ({min(pre):.0f}-{max(pre):.0f}) | {pre_gf:.1f} | {pre_gf / ceiling:.2f} | "
              f"{md:.1f} ({min(dec):.1f}-{max(dec):.1f}) | {1000 / md:.2f} | {dec_gf:.1f} | {dec_gf / ceiling:.2f} |")
PY
