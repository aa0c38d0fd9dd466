#!/usr/bin/env bash
# Core attention disaggregation on this machine, one rank per core, in one script run:
# tokens/s of dp = 1 against N ranks in several layouts, on the same config and
# per-rank batch (default: the `pretrain` length mix, whose equal-token sequences carry
# unequal attention work). Layouts (--layouts, a space-separated list):
#   colocated   dp = N, attention where the tokens are (the straggler baseline)
#   packing     dp = N, the WLB-LLM packing baseline (parallel.dp_balance = packing)
#   cad         dp = N, CAD with ping-pong nano-batches (the default)
#   cad_single  dp = N, CAD one exchange at a time (attention.cad_pingpong = false)
#   cp          cp = N, per-document context parallelism (zigzag, ring), colocated
#   pp_1f1b     pp = N, colocated, 1F1B, --micro-batches per step
#   pp_cad      pp = N, CAD: same-phase ticks whose dummies serve attention
#   pp_cad_single  the same without ping-pong
# Default: colocated packing cad cad_single cp. The layouts alternate for --rounds
# rounds; each round's speedups are ratios to that round's dp = 1 run (median tokens/s
# of the steps after the first two), and the figures are medians over rounds, with
# lct's straggler figures (compute max/mean, idle), for CAD attention pairs max/mean
# before and after planning and bytes moved, and for pipelines the bubble and the
# activation memory.
#
#   bash bench/cad_scaling.sh [--config configs/default.toml] [--steps 20] [--rounds 5]
#                             [--ranks N] [--layouts "..."] [--micro-batches 4]
#                             [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=configs/default.toml
STEPS=20
ROUNDS=5
RANKS=$(nproc)
LAYOUTS="colocated packing cad cad_single cp"
MICRO_BATCHES=4
source bench/common.sh  # LCT, MPI as root, $work, bench_options, bench_train
bench_options "steps rounds ranks layouts micro-batches" "$@"
set -- "${BENCH_REST[@]}"

layout_args() {  # the lct train arguments of a layout
  case $1 in
    colocated) echo "" ;;
    packing) echo "--parallel.dp_balance packing" ;;
    cad) echo "--attention.placement cad" ;;
    cad_single) echo "--attention.placement cad --attention.cad_pingpong false" ;;
    cp) echo "--parallel.dp 1 --parallel.cp $RANKS" ;;
    pp_1f1b) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES" ;;
    pp_cad) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES --attention.placement cad" ;;
    pp_cad_single) echo "--parallel.dp 1 --parallel.pp $RANKS --train.micro_batches $MICRO_BATCHES --attention.placement cad --attention.cad_pingpong false" ;;
    *) echo "cad_scaling: unknown layout '$1'" >&2; exit 1 ;;
  esac
}
for l in $LAYOUTS; do layout_args "$l" > /dev/null; done

echo "cad scaling | config $CONFIG | $ROUNDS rounds x $STEPS steps | one rank per core, 1 thread each | $RANKS ranks: $LAYOUTS"
for r in $(seq "$ROUNDS"); do
  bench_train 1 "$work/r${r}_dp1" --train.steps "$STEPS" "$@"
  for l in $LAYOUTS; do
    # shellcheck disable=SC2046  # the layout's arguments are words
    bench_train "$RANKS" "$work/r${r}_$l" --train.steps "$STEPS" $(layout_args "$l") "$@"
  done
done
grep -m1 "lct train |" "$work/r1_dp1.log"
for l in $LAYOUTS; do grep -m1 "core attention disaggregated" "$work/r1_$l.log" || true; done
python3 - "$work" "$ROUNDS" "$RANKS" $LAYOUTS <<'PY'
import json, statistics, sys
work, rounds, n, layouts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
med = statistics.median
def load(d):
    return [json.loads(l) for l in open(f"{d}/metrics.jsonl")][2:]
print(f"  {'round':>5} {'dp=1 tok/s':>11}" + "".join(f" {m:>13} {'speedup':>7}" for m in layouts))
sp = {m: [] for m in layouts}
for r in range(1, rounds + 1):
    one = med(x["tokens_per_s"] for x in load(f"{work}/r{r}_dp1"))
    row = f"  {r:>5} {one:>11.0f}"
    for m in layouts:
        t = med(x["tokens_per_s"] for x in load(f"{work}/r{r}_{m}"))
        sp[m].append(t / one)
        row += f" {t:>13.0f} {t / one:>6.2f}x"
    print(row)
for m in layouts:
    xs = [x for r in range(1, rounds + 1) for x in load(f"{work}/r{r}_{m}")]
    line = (f"  {n} ranks {m:>13}: median speedup {med(sp[m]):.2f}x | compute max/mean "
            f"{med(x['compute_max_over_mean'] for x in xs):.3f} | idle {100 * med(x['idle_fraction'] for x in xs):.1f}%"
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
PY
