#!/usr/bin/env bash
# train.precision = bf16 against fp32 on this machine, one process with every core
# (train.threads 0), in one script run. Two workloads: the config as given (default:
# 2K-token sequences of the pretrain mix) and one --long-token document per step
# (default 16K). fp32 and bf16 alternate for --rounds rounds; each round's speedup is
# the ratio of the two adjacent runs' wall-clock throughput (bench/throughput.py: total
# tokens over total time of the steps after the first two), and the figure is the
# median over rounds with their range. bf16 runs on its default kernel (train.bf16_kernel
# = auto: the CPU's bf16 instructions, or rounded operands on the fp32 library where that
# is faster here); on a CPU with bf16 instructions each round also runs the other kernel
# (native or rounded, whichever auto did not pick), so both are set against fp32 in the
# same rounds. fp32 runs on its default library (train.fp32_gemm = auto). Also: the peak
# activation memory of each (the slot pool's peak, metrics.jsonl), and what runs the
# bf16 products here.
#
# With --quality N (default 0: off) it then trains the config N steps in each precision
# for each of --seeds seeds (default 1; the same seed for both), and sets the mean loss of
# bf16's last 20 steps against fp32's. Beside them, fp32 on the other fp32 library
# (train.fp32_gemm openblas vs onednn: fp32 again, only summed in another order) shows
# how far two runs drift apart from last-bit differences alone.
#
#   bash bench/precision.sh [--config configs/default.toml] [--steps 8] [--rounds 5]
#                           [--long 16384] [--quality 150] [--seeds 3] [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, $work, bench_options, bench_one, bench_setting
bench_options "steps=8 rounds=5 long=16384 quality=0 seeds=1" "$@"
set -- "${BENCH_REST[@]}"

one_document_args "$LONG"
echo "precision | config $CONFIG | $ROUNDS rounds x $STEPS steps | one process, all cores"
lscpu | grep -E "^Model name" | sed 's/  */ /g'
# the kernel auto does not pick, where the CPU has bf16 instructions ("" without them)
OTHER=""
if [ "$ROUNDS" -gt 0 ]; then
  RUN_STEPS=1 bench_setting probe train.precision bf16 "$@"
  if lscpu | grep -qwE "avx512_bf16|amx_bf16"; then
    if grep -q "bf16 kernel native" "$work/probe.log"; then OTHER=rounded; else OTHER=native; fi
  fi
fi
for r in $(seq "$ROUNDS"); do
  for load in mix long; do
    args=("$@")
    [ "$load" = long ] && args=("${ONE_DOCUMENT[@]}" "$@")
    bench_setting "r${r}_${load}_fp32" train.precision fp32 "${args[@]}"
    bench_setting "r${r}_${load}_bf16" train.precision bf16 "${args[@]}"
    [ -z "$OTHER" ] || bench_setting "r${r}_${load}_bf16_$OTHER" train.precision bf16 --train.bf16_kernel "$OTHER" "${args[@]}"
  done
done
if [ "$ROUNDS" -gt 0 ]; then  # (--rounds 0: the quality runs only)
grep -m1 "lct train |" "$work/r1_mix_fp32.log"
grep -m1 "fp32 products" "$work/r1_mix_fp32.log" | sed 's/^.*fp32 products/fp32 products/'
grep -m1 "precision bf16" "$work/r1_mix_bf16.log" | sed 's/^.*bf16 kernel/bf16 (auto) kernel/'
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$OTHER" <<'PY'
import statistics, sys
from throughput import load, measured, wall_clock
work, rounds, other = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = ["bf16"] + ([f"bf16_{other}"] if other else [])
names = {"bf16": "bf16 (auto)", f"bf16_{other}": f"bf16 {other}"}
print("  throughput = total tokens / total wall-clock time of steps 3.. of each run")
for load_name, label in (("mix", "config's mix"), ("long", "one long document")):
    ratios = {x: [] for x in runs}
    print(f"  {label}:")
    print(f"  {'round':>5} {'fp32 tok/s':>11}" + "".join(f" {names[x] + ' tok/s':>19} {'/ fp32':>7}" for x in runs))
    for r in range(1, rounds + 1):
        ta = wall_clock(load(f"{work}/r{r}_{load_name}_fp32"))["tokens_per_s"]
        line = f"  {r:>5} {ta:>11.0f}"
        for x in runs:
            tb = wall_clock(load(f"{work}/r{r}_{load_name}_{x}"))["tokens_per_s"]
            ratios[x].append(tb / ta)
            line += f" {tb:>19.0f} {tb / ta:>6.2f}x"
        print(line)
    peak = lambda rows: max(x["peak_activation_bytes"] for x in rows) / 2**20
    a, b = load(f"{work}/r1_{load_name}_fp32"), load(f"{work}/r1_{load_name}_bf16")
    for x in runs:
        v = ratios[x]
        print(f"  {names[x]} / fp32 by wall clock: {statistics.median(v):.2f}x (median of {rounds} rounds, "
              f"{min(v):.2f}-{max(v):.2f})")
    print(f"  peak activations fp32 {peak(a):.0f} MiB, bf16 {peak(b):.0f} MiB ({peak(b) / peak(a):.2f}x)")
PY
fi

[ "$QUALITY" -gt 0 ] || exit 0
for seed in $(seq "$SEEDS"); do
  for run in fp32:auto bf16:auto fp32:openblas fp32:onednn; do
    precision=${run%:*} library=${run#*:}
    bench_one "$work/q${seed}_${precision}_$library" --train.steps "$QUALITY" --train.precision "$precision" \
      --train.fp32_gemm "$library" --train.seed "$seed" "$@"
  done
done
PYTHONPATH=bench python3 - "$work" "$QUALITY" "$SEEDS" <<'PY'
import sys
from throughput import load
work, steps, seeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def last20(run):
    losses = [x["loss"] for x in load(f"{work}/{run}")][-20:]
    return sum(losses) / len(losses)
print(f"  quality: {steps} steps, mean loss of the last 20 steps")
print(f"  {'seed':>4} {'fp32':>8} {'bf16':>8} {'bf16 vs fp32':>13} {'fp32 openblas':>14} {'fp32 onednn':>12} {'fp32 vs fp32':>13}")
diffs, noise = [], []
for s in range(1, seeds + 1):
    a, b = last20(f"q{s}_fp32_auto"), last20(f"q{s}_bf16_auto")
    o, d = last20(f"q{s}_fp32_openblas"), last20(f"q{s}_fp32_onednn")
    diffs.append(100 * (b - a) / a)
    noise.append(100 * (d - o) / o)
    print(f"  {s:>4} {a:>8.4f} {b:>8.4f} {diffs[-1]:>+12.2f}% {o:>14.4f} {d:>12.4f} {noise[-1]:>+12.2f}%")
mean = lambda v: sum(v) / len(v)
print(f"  mean over seeds: bf16 vs fp32 {mean(diffs):+.2f} %, fp32 vs fp32 (library) {mean(noise):+.2f} %; "
      f"largest |difference| {max(map(abs, diffs)):.2f} % and {max(map(abs, noise)):.2f} %")
PY
