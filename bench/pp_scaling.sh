#!/usr/bin/env bash
# Pipeline-parallel scaling on this machine, one rank per core, in one script run:
# tokens/s of one rank (pp = 1) against pp = N stages (N ranks, 1 thread each) with the
# same micro-batches per step, on fixed-length documents (equal micro-batch times, the
# case the bubble formula describes). The layouts alternate for --rounds rounds; each
# round's speedup is the ratio of the adjacent runs' wall-clock throughput (total tokens over total time of the steps after the
# first two), and the figure is the median over rounds. Also reported: the measured
# bubble (worst stage, lct's metrics) next to (pp-1)/(m+pp-1), and stage 0's peak
# activation bytes under 1F1B and GPipe (1F1B holds pp micro-batches, GPipe all m).
#
#   bash bench/pp_scaling.sh [--config configs/default.toml] [--steps 6] [--rounds 3]
#                            [--stages N] [--micro-batches 8] [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, MPI as root, $work, bench_options, bench_degree
bench_options "steps=6 rounds=3 stages=$(nproc) micro-batches=8" "$@"
set -- "${BENCH_REST[@]}"

run() { bench_degree pp "$1" "$2" --data.doc_lengths fixed --train.micro_batches "$MICRO_BATCHES" "${@:3}"; }  # ranks dir [args]

echo "pp scaling | config $CONFIG, fixed-length documents | $MICRO_BATCHES micro-batches | $ROUNDS rounds x $STEPS steps | one rank per core, 1 thread each"
for r in $(seq "$ROUNDS"); do
  run 1 "$work/r${r}_pp1" "$@"
  run "$STAGES" "$work/r${r}_ppN" "$@"
done
STEPS=2 run "$STAGES" "$work/gpipe" --parallel.pp_schedule gpipe "$@"
grep -m1 "lct train |" "$work/r1_pp1.log"
grep -m1 "pipeline:" "$work/r1_ppN.log"
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$STAGES" "$MICRO_BATCHES" <<'PY'
import statistics, sys
import throughput
work, rounds, pp, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(d, skip=2):
    return throughput.load(d)[skip:]
def tps(d):  # wall clock: total tokens over total time of steps 3..
    return throughput.wall_clock(throughput.load(d))["tokens_per_s"]
ratios, bubbles = [], []
print("  throughput = total tokens / total wall-clock time of steps 3.. of each run")
print(f"  {'round':>5} {'pp=1 tok/s':>11} {'pp=%d tok/s' % pp:>11} {'speedup':>8} {'bubble':>7} {'theory':>7}")
for r in range(1, rounds + 1):
    a, b = load(f"{work}/r{r}_pp1"), load(f"{work}/r{r}_ppN")
    ta, tb = tps(f"{work}/r{r}_pp1"), tps(f"{work}/r{r}_ppN")
    bub = statistics.median(x["bubble_fraction"] for x in b)
    theory = b[0]["bubble_theoretical"]
    ratios.append(tb / ta)
    bubbles.append(bub)
    print(f"  {r:>5} {ta:>11.0f} {tb:>11.0f} {tb / ta:>7.2f}x {100 * bub:>6.1f}% {100 * theory:>6.1f}%")
print(f"  speedup pp={pp} / pp=1 by wall clock: {statistics.median(ratios):.2f}x (rounds "
      f"{min(ratios):.2f}-{max(ratios):.2f}; ideal with the bubble: "
      f"{pp * (1 - theory):.2f}x); median bubble {100 * statistics.median(bubbles):.1f}% vs theory {100 * theory:.1f}%")
one = load(f"{work}/r1_ppN", 0)[-1]["stage_activation_bytes"]
gp = load(f"{work}/gpipe", 0)[-1]["stage_activation_bytes"]
mib = lambda v: v / 1048576
print("  peak activation bytes per stage (slots in use x slot size; backward scratch, shared by all slots, not included):")
print("    1f1b : " + ", ".join(f"stage {s} {mib(v):.1f} MiB" for s, v in enumerate(one)))
print("    gpipe: " + ", ".join(f"stage {s} {mib(v):.1f} MiB" for s, v in enumerate(gp)))
print(f"  stage 0, 1f1b / gpipe = {one[0] / gp[0]:.3f} (pp/m = {pp / m:.3f})")
PY
