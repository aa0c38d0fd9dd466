#!/usr/bin/env bash
# lct across two hosts over a link of limited bandwidth, against lct simulate: dp = 2,
# cp = 2 (ring) and CAD dp = 2, one rank per host (scripts/cluster.sh: namespace hosts,
# TCP, every link limited to the rate each way by tc tbf), one thread per rank. Measured:
# the step time by the wall clock (total time over the steps after the first two, median
# over --rounds alternating rounds) and the communication lct reports as exposed (idle:
# the mean fraction of the step a rank waits in communication, times the step). Then
# lct simulate --hosts 2 at the bandwidth lct probed (one calibration for every
# prediction, timed after the measured runs) predicts the same steps: between hosts it
# hides nothing (src/sim/network.h). Beside it, the one-host model at that bandwidth
# (everything lct overlaps hidden as on shared memory), which is what the network mode
# corrects.
#
#   bash bench/shaped_network.sh [--config configs/default.toml] [--steps 12]
#                                [--rounds 3] [--rates "1gbit 200mbit"]
#                                [--latency 60] [extra lct args...]
# --latency: the simulator's per-message latency in microseconds (TCP through the
# namespaces' bridge).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, MPI as root, $work, bench_options
bench_options "steps=12 rounds=3 rates latency=60" "$@"
RATES=${RATES:-"1gbit 200mbit"}
set -- "${BENCH_REST[@]}"

declare -A ARGS=(
  [dp]="--parallel.dp 2"
  [cp_ring]="--parallel.dp 1 --parallel.cp 2 --parallel.cp_comm ring"
  [cad]="--parallel.dp 2 --attention.placement cad"
)
LAYOUTS="dp cp_ring cad"
# once, outside the measurement: the machine's cached choices (GEMM library, CAD cost model)
"$LCT" train --config "$CONFIG" --train.threads 1 --train.steps 1 --checkpoint.every 0 \
  --checkpoint.dir "$work/warm" "$@" > /dev/null
bash scripts/cluster.sh --hosts 2 -- "$LCT" train --config "$CONFIG" --train.threads 1 --train.steps 1 \
  --checkpoint.every 0 --checkpoint.dir "$work/warm_cad" --attention.placement cad "$@" > "$work/warm_cad.log" 2>&1
echo "shaped network | config $CONFIG | $ROUNDS rounds x $STEPS steps | 2 hosts x 1 rank, 1 thread each | rates $RATES"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(grep -m1 '^lct train' "$work/warm_cad.log" 2> /dev/null | cut -d'|' -f2)"
for r in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    for l in $LAYOUTS; do
      dir="$work/r${r}_${rate}_$l"
      # shellcheck disable=SC2086
      bash scripts/cluster.sh --hosts 2 --rate "$rate" -- "$LCT" train --config "$CONFIG" --train.threads 1 \
        --checkpoint.every 0 --checkpoint.dir "$dir" --train.steps "$STEPS" ${ARGS[$l]} "$@" > "$dir.log" 2>&1 ||
        { cat "$dir.log"; exit 1; }
    done
  done
done
"$LCT" simulate --config "$CONFIG" --train.threads 1 --ranks 1 --steps 1 \
  --calibration-out "$work/calibration.txt" "$@" > /dev/null
for rate in $RATES; do
  # the bandwidth lct measured on that link, not the nominal rate: the largest of the
  # context-parallel and CAD runs' probes ("probed point-to-point bandwidth"; some
  # probes come out at half the link, see docs/clusters.md)
  gbps=$(grep -h -o "probed point-to-point bandwidth [0-9.e+-]*" "$work"/r*_"${rate}"_*.log | awk '{ print $4 }' |
         sort -g | tail -1)
  echo "$rate: simulated at the probed $gbps GB/s" >&2
  for l in $LAYOUTS; do
    # the steps the measurement reports: 3..STEPS
    # shellcheck disable=SC2086
    "$LCT" simulate --config "$CONFIG" --train.threads 1 --ranks 2 --first-step 2 --steps $((STEPS - 2)) \
      --hosts 2 --host-bandwidth "$gbps" --host-latency "$LATENCY" --json --calibration "$work/calibration.txt" \
      ${ARGS[$l]} "$@" > "$work/sim_${rate}_$l.json"
    # the one-host model: the same link, with what lct overlaps hidden as on shared memory
    # shellcheck disable=SC2086
    "$LCT" simulate --config "$CONFIG" --train.threads 1 --ranks 2 --first-step 2 --steps $((STEPS - 2)) \
      --bandwidth "$gbps" --latency "$LATENCY" --json --calibration "$work/calibration.txt" \
      ${ARGS[$l]} "$@" > "$work/simx_${rate}_$l.json"
  done
done
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$RATES" "$LAYOUTS" <<'PY'
import json, statistics, sys
from throughput import load, measured
work, rounds, rates, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
med = statistics.median
print(f"  {'rate':<8} {'layout':<8} {'step ms':>8} {'spread':>13} {'sim. ms':>8} {'error':>7}"
      f" {'exposed ms':>10} {'sim.':>7} {'probed GB/s':>11} {'one-host model':>24}")
worst = worst_x = 0.0
for rate in rates:
    for l in layouts:
        steps, exposed = [], []
        for r in range(1, rounds + 1):
            rows = measured(load(f"{work}/r{r}_{rate}_{l}"))
            ms = sum(x["ms"] for x in rows) / len(rows)  # the wall clock over the steps
            steps.append(ms)
            exposed.append(sum(x["idle_fraction"] * x["ms"] for x in rows) / len(rows))
        probe = ""
        for line in open(f"{work}/r1_{rate}_{l}.log"):
            if "probed point-to-point bandwidth" in line:
                probe = line.split("probed point-to-point bandwidth")[1].split("GB/s")[0].strip()
        sim = json.load(open(f"{work}/sim_{rate}_{l}.json"))
        sim_ms = 1e3 * sim["step_seconds"]
        err = sim_ms / med(steps) - 1
        worst = max(worst, abs(err))
        simx_ms = 1e3 * json.load(open(f"{work}/simx_{rate}_{l}.json"))["step_seconds"]
        errx = simx_ms / med(steps) - 1
        worst_x = max(worst_x, abs(errx))
        print(f"  {rate:<8} {l:<8} {med(steps):>8.1f} {min(steps):>6.1f}-{max(steps):<6.1f} {sim_ms:>8.1f}"
              f" {100 * err:>+6.1f}% {med(exposed):>10.1f} {sim['idle_fraction'] * sim_ms:>7.1f} {probe:>11}"
              f" {simx_ms:>14.1f} {100 * errx:>+7.1f}%")
print(f"\n  largest |simulated / measured - 1|: {100 * worst:.1f}% (goal: within 15%); the one-host "
      f"model's: {100 * worst_x:.1f}%")
PY
