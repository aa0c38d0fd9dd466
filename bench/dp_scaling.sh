#!/usr/bin/env bash
# Data-parallel scaling on this machine, one rank per core, in one script run:
# tokens/s of dp = 1 (1 rank, 1 thread) against dp = N (N ranks, 1 thread each) on the
# same config and per-rank batch. The host is noisy, so the two layouts alternate for
# --rounds rounds; each round's speedup is the ratio of the two adjacent runs'
# wall-clock throughput (bench/throughput.py: total tokens over total time of the steps
# after the first two), and the figure is the median over rounds with their range.
# compute max/mean and idle are lct's per-rank straggler figures (metrics.jsonl).
#
#   bash bench/dp_scaling.sh [--config configs/default.toml] [--steps 12] [--rounds 3]
#                            [--ranks N] [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, MPI as root, $work, bench_options, bench_train
bench_options "steps=12 rounds=3 ranks=$(nproc)" "$@"
set -- "${BENCH_REST[@]}"

echo "dp scaling | config $CONFIG | $ROUNDS rounds x $STEPS steps | one rank per core, 1 thread each"
for r in $(seq "$ROUNDS"); do
  bench_train 1 "$work/r${r}_dp1" "$@"
  bench_train "$RANKS" "$work/r${r}_dpN" "$@"
done
grep -m1 "lct train |" "$work/r1_dp1.log"
grep -m1 "MPI:" "$work/r1_dpN.log"
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$RANKS" <<'PY'
import statistics, sys
from throughput import load, measured, wall_clock
work, rounds, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ratios = []
print("  throughput = total tokens / total wall-clock time of steps 3.. of each run")
print(f"  {'round':>5} {'dp=1 tok/s':>11} {'dp=%d tok/s' % ranks:>11} {'speedup':>8} {'compute max/mean':>17} {'idle':>6}")
for r in range(1, rounds + 1):
    a, b = load(f"{work}/r{r}_dp1"), load(f"{work}/r{r}_dpN")
    ta, tb = wall_clock(a)["tokens_per_s"], wall_clock(b)["tokens_per_s"]
    cm = statistics.median(x["compute_max_over_mean"] for x in measured(b))
    idle = statistics.median(x["idle_fraction"] for x in measured(b))
    ratios.append(tb / ta)
    print(f"  {r:>5} {ta:>11.0f} {tb:>11.0f} {tb / ta:>7.2f}x {cm:>17.3f} {100 * idle:>5.1f}%")
print(f"  speedup dp={ranks} / dp=1 by wall clock: {statistics.median(ratios):.2f}x "
      f"(rounds {min(ratios):.2f}-{max(ratios):.2f}; ideal {ranks})")
PY
