#!/usr/bin/env bash
# lct simulate against measured runs on this machine, in one script run: dp = 1 and
# dp = N colocated, with packing, CAD with and without ping-pong, pp = N (1F1B, 4
# micro-batches) and cp = N (the config's split and exchange) (one rank per core,
# one thread each), wall-clock throughput (total tokens over total time of the steps
# after the first two) as the median over --rounds alternating rounds, next to what `lct simulate` predicts for the same config from a
# single-process calibration. Then the simulated straggler trend: idle and compute
# max/mean of colocated data parallelism and of CAD from 2 to 64 ranks.
#
#   bash bench/simulate_validation.sh [--config configs/default.toml] [--steps 20]
#                                     [--rounds 3] [--ranks N] [extra lct args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, MPI as root, $work, bench_options, bench_train
bench_options "steps=20 rounds=3 ranks=$(nproc)" "$@"
set -- "${BENCH_REST[@]}"

declare -A ARGS=(
  [dp1]=""
  [colocated]=""
  [packing]="--parallel.dp_balance packing"
  [cad]="--attention.placement cad"
  [cad_pingpong]="--attention.placement cad --attention.cad_pingpong true"
  [pp]="--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches 4"
  [cp]="--parallel.dp 1 --parallel.cp $RANKS"
)
LAYOUTS="dp1 colocated packing cad cad_pingpong pp cp"
echo "simulator validation | config $CONFIG | $ROUNDS rounds x $STEPS steps | $RANKS ranks, 1 thread each"
for r in $(seq "$ROUNDS"); do
  for l in $LAYOUTS; do
    np=$RANKS
    [ "$l" = dp1 ] && np=1
    # shellcheck disable=SC2086
    bench_train "$np" "$work/r${r}_$l" ${ARGS[$l]} "$@"
  done
done
# one calibration (timed once, after the measured runs) for every prediction
"$LCT" simulate --config "$CONFIG" --train.threads 1 --ranks 1 --steps 1 \
  --calibration-out "$work/calibration.txt" "$@" > /dev/null
for l in $LAYOUTS; do
  np=$RANKS
  [ "$l" = dp1 ] && np=1
  # shellcheck disable=SC2086
  "$LCT" simulate --config "$CONFIG" --train.threads 1 --ranks "$np" --steps "$STEPS" --json \
    --calibration "$work/calibration.txt" ${ARGS[$l]} "$@" > "$work/sim_$l.json"
done
sweep=""
for n in 2 4 8 16 32 64; do
  for l in colocated cad; do
    # shellcheck disable=SC2086
    "$LCT" simulate --config "$CONFIG" --train.threads 1 --ranks "$n" --steps 8 \
      --calibration "$work/calibration.txt" --json ${ARGS[$l]} "$@" > "$work/sweep_${l}_$n.json"
  done
  sweep="$sweep $n"
done
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$LAYOUTS" "$sweep" <<'PY'
import json, statistics, sys
from throughput import wall_clock
work, rounds, layouts, sweep = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
med = statistics.median
print(f"  {'layout':<11} {'measured tok/s':>14} {'simulated':>10} {'error':>7} {'idle meas.':>10} {'idle sim.':>9} {'bubble meas.':>12} {'sim.':>6}")
for l in layouts:
    runs = [[json.loads(x) for x in open(f"{work}/r{r}_{l}/metrics.jsonl")] for r in range(1, rounds + 1)]
    meas = med(wall_clock(run)["tokens_per_s"] for run in runs)  # by wall clock, steps 3..
    runs = [run[2:] or run for run in runs]  # the first two steps warm up
    idle = med(x.get("idle_fraction", 0) for run in runs for x in run)
    sim = json.load(open(f"{work}/sim_{l}.json"))
    err = sim["tokens_per_s"] / meas - 1
    bub = med(x.get("bubble_fraction", 0) for run in runs for x in run)
    print(f"  {l:<11} {meas:>14.0f} {sim['tokens_per_s']:>10.0f} {100 * err:>+6.1f}% {100 * idle:>9.1f}% "
          f"{100 * sim['idle_fraction']:>8.1f}% {100 * bub:>11.1f}% {100 * sim['bubble_fraction']:>5.1f}%")
print(f"\n  simulated, same config: {'ranks':>5} {'colocated idle':>14} {'compute max/mean':>16} {'CAD idle':>9} {'CAD speedup':>11}")
for n in sweep:
    c = json.load(open(f"{work}/sweep_colocated_{n}.json"))
    d = json.load(open(f"{work}/sweep_cad_{n}.json"))
    print(f"  {'':<22} {n:>5} {100 * c['idle_fraction']:>13.1f}% {c['compute_max_over_mean']:>16.3f} "
          f"{100 * d['idle_fraction']:>8.1f}% {d['tokens_per_s'] / c['tokens_per_s']:>10.2f}x")
PY
