#!/usr/bin/env bash
# Core attention disaggregation on this machine, one rank per core, in one script run:
# tokens/s of dp = 1 against N ranks in several layouts, on the same config and
# per-rank batch (default: the `pretrain` length mix, whose equal-token sequences carry
# unequal attention work). Layouts (--layouts, a space-separated list):
#   colocated   dp = N, attention where the tokens are (the straggler baseline)
#   packing     dp = N, the WLB-LLM packing baseline (parallel.dp_balance = packing)
#   cad         dp = N, CAD with its defaults (one exchange at a time, measured cost model)
#   cad_pingpong  dp = N, CAD with ping-pong nano-batches (attention.cad_pingpong = true)
#   cp          cp = N, per-document context parallelism (zigzag, ring), colocated
#   pp_1f1b     pp = N, colocated, 1F1B, --micro-batches per step
#   pp_cad      pp = N, CAD with its defaults: same-phase ticks whose dummies serve
#               attention (ping-pong on: attention.cad_pingpong = auto)
#   pp_cad_pingpong  the same with ping-pong set explicitly
#   pp_cad_one_exchange  the same without ping-pong (attention.cad_pingpong = false)
# Default: colocated packing cad cad_pingpong cp. The layouts alternate for --rounds
# rounds; each round's speedups are ratios to that round's dp = 1 run, by wall clock
# (bench/throughput.py: total tokens over total time of the steps after the first two),
# and the figures are the median and the range over rounds, with the per-step tokens/s
# percentiles, lct's straggler figures (compute max/mean, idle; worst step too), for
# CAD attention pairs max/mean before and after planning and bytes moved, and for
# pipelines the bubble and the activation memory.
#
# --per-step 1 also prints, for round 1, every step's time of each layout over the same
# step of colocated dp = N (the first layout when colocated is not run).
#
#   bash bench/cad_scaling.sh [--config configs/default.toml] [--steps 20] [--rounds 5]
#                             [--ranks N] [--layouts "..."] [--micro-batches 4]
#                             [--per-step 0|1] [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
LAYOUTS="colocated packing cad cad_pingpong cp"
source bench/common.sh  # LCT, MPI as root, $work, bench_options, bench_train
bench_options "steps=20 rounds=5 ranks=$(nproc) layouts micro-batches=4 per-step=0" "$@"
set -- "${BENCH_REST[@]}"

layout_args() {  # the lct train arguments of a layout
  case $1 in
    colocated) echo "" ;;
    packing) echo "--parallel.dp_balance packing" ;;
    cad) echo "--attention.placement cad" ;;
    cad_pingpong) echo "--attention.placement cad --attention.cad_pingpong true" ;;
    cp) echo "--parallel.dp 1 --parallel.cp $RANKS" ;;
    pp_1f1b) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES" ;;
    pp_cad) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES --attention.placement cad" ;;
    pp_cad_pingpong) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES --attention.placement cad --attention.cad_pingpong true" ;;
    pp_cad_one_exchange) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES --attention.placement cad --attention.cad_pingpong false" ;;
    *) echo "cad_scaling: unknown layout '$1'" >&2; exit 1 ;;
  esac
}
for l in $LAYOUTS; do layout_args "$l" > /dev/null; done

echo "cad scaling | config $CONFIG | $ROUNDS rounds x $STEPS steps | one rank per core, 1 thread each | $RANKS ranks: $LAYOUTS"
for r in $(seq "$ROUNDS"); do
  bench_train 1 "$work/r${r}_dp1" "$@"
  for l in $LAYOUTS; do
    # shellcheck disable=SC2046  # the layout's arguments are words
    bench_train "$RANKS" "$work/r${r}_$l" $(layout_args "$l") "$@"
  done
done
grep -m1 "lct train |" "$work/r1_dp1.log"
for l in $LAYOUTS; do grep -m1 "core attention disaggregated" "$work/r1_$l.log" || true; done
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$RANKS" "$PER_STEP" $LAYOUTS <<'PY'
import statistics, sys
from throughput import load, measured, wall_clock
work, rounds, n, per_step, layouts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5:]
med = statistics.median
print("  throughput = total tokens / total wall-clock time of steps 3.. of each run")
print(f"  {'round':>5} {'dp=1 tok/s':>11}" + "".join(f" {m:>13} {'speedup':>7}" for m in layouts))
sp = {m: [] for m in layouts}
wc = {m: [] for m in layouts}
for r in range(1, rounds + 1):
    one = wall_clock(load(f"{work}/r{r}_dp1"))["tokens_per_s"]
    row = f"  {r:>5} {one:>11.0f}"
    for m in layouts:
        w = wall_clock(load(f"{work}/r{r}_{m}"))
        wc[m].append(w)
        t = w["tokens_per_s"]
        sp[m].append(t / one)
        row += f" {t:>13.0f} {t / one:>6.2f}x"
    print(row)
for m in layouts:
    xs = [x for r in range(1, rounds + 1) for x in measured(load(f"{work}/r{r}_{m}"))]
    p = wc[m][len(wc[m]) // 2]
    line = (f"  {n} ranks {m:>13}: speedup {med(sp[m]):.2f}x (rounds {min(sp[m]):.2f}-{max(sp[m]):.2f}) | "
            f"per-step tok/s p10/p50/p90 {p['p10']:.0f}/{p['p50']:.0f}/{p['p90']:.0f} | compute max/mean "
            f"{med(x['compute_max_over_mean'] for x in xs):.3f} (worst {max(x['compute_max_over_mean'] for x in xs):.3f})"
            f" | idle {100 * med(x['idle_fraction'] for x in xs):.1f}%"
            f" | attention pairs max/mean {med(x['attention_pairs_max_over_mean'] for x in xs):.3f}")
    if "cad" in m:
        line += (f" -> {med(x['attention_pairs_served_max_over_mean'] for x in xs):.3f} after planning | "
                 f"{med(x.get('exchange_bytes_sent', 0) for x in xs) / 2**20:.1f} MiB sent per rank and step, "
                 f"exposed {100 * med(x.get('exchange_exposed_fraction', 0) for x in xs):.1f}%, "
                 f"hidden {100 * med(x.get('exchange_hidden_fraction', 0) for x in xs):.1f}%")
    if m.startswith("pp"):
        line += (f" | bubble {100 * med(x.get('bubble_fraction', 0) for x in xs):.1f}% (theory "
                 f"{100 * med(x.get('bubble_theoretical', 0) for x in xs):.1f}%) | activations "
                 f"{max(x.get('peak_activation_bytes', 0) for x in xs) / 2**20:.0f} MiB")
    print(line)
if per_step:
    base = "colocated" if "colocated" in layouts else layouts[0]
    runs = {m: load(f"{work}/r1_{m}") for m in layouts}
    others = [m for m in layouts if m != base]
    print(f"\n  round 1, per step: ms of {base}, and of each other layout with its time over {base}'s")
    print(f"  {'step':>4} {base + ' ms':>14}" + "".join(f" {m + ' ms':>15} {'/ ' + base:>13}" for m in others))
    worst = {m: 0.0 for m in others}
    for i, b in enumerate(runs[base]):
        row = f"  {b['step']:>4} {b['ms']:>14.1f}"
        for m in others:
            x = runs[m][i]
            worst[m] = max(worst[m], x["ms"] / b["ms"]) if i >= 2 else worst[m]
            row += f" {x['ms']:>15.1f} {x['ms'] / b['ms']:>12.3f}x"
        print(row)
    for m in others:
        print(f"  {m}: slowest step after the warm-up {worst[m]:.3f}x {base}'s same step")
PY
