#!/usr/bin/env bash
# Core attention disaggregation on this machine, one rank per core, in one script run:
# tokens/s of dp = 1 against dp = N with colocated attention, with the WLB-LLM packing
# baseline (parallel.dp_balance = packing) and with CAD (attention.placement = cad) with
# ping-pong nano-batches (the default) and without (cad_single), on
# the same config and per-rank batch (default: the
# `pretrain` length mix, whose equal-token sequences carry unequal attention work).
# The five layouts alternate for --rounds rounds; each round's speedups are ratios of
# adjacent runs' median tokens/s (steps after the first two), and the figures are
# medians over rounds, with lct's straggler figures (compute max/mean, idle) and, for
# CAD, attention pairs max/mean before and after planning and bytes moved.
#
#   bash bench/cad_scaling.sh [--config configs/default.toml] [--steps 12] [--rounds 3]
#                             [--ranks N] [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=configs/default.toml
STEPS=12
ROUNDS=3
RANKS=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --config) CONFIG=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    *) break ;;
  esac
done
source bench/common.sh  # LCT, MPI as root, $work, bench_train

run() {  # ranks dir [extra args]
  local np=$1 dir=$2
  shift 2
  bench_train "$np" "$dir" --train.steps "$STEPS" "$@"
}

echo "cad scaling | config $CONFIG | $ROUNDS rounds x $STEPS steps | one rank per core, 1 thread each"
for r in $(seq "$ROUNDS"); do
  run 1 "$work/r${r}_dp1" "$@"
  run "$RANKS" "$work/r${r}_colocated" "$@"
  run "$RANKS" "$work/r${r}_packing" --parallel.dp_balance packing "$@"
  run "$RANKS" "$work/r${r}_cad" --attention.placement cad "$@"
  run "$RANKS" "$work/r${r}_cad_single" --attention.placement cad --attention.cad_pingpong false "$@"
done
grep -m1 "lct train |" "$work/r1_dp1.log"
grep -m1 "core attention disaggregated" "$work/r1_cad.log"
python3 - "$work" "$ROUNDS" "$RANKS" <<'PY'
import json, statistics, sys
work, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median
def load(d):
    return [json.loads(l) for l in open(f"{d}/metrics.jsonl")][2:]
LAYOUTS = ("colocated", "packing", "cad", "cad_single")
print(f"  {'round':>5} {'dp=1 tok/s':>11}" + "".join(f" {m:>10} {'speedup':>8}" for m in LAYOUTS))
sp = {m: [] for m in LAYOUTS}
for r in range(1, rounds + 1):
    one = med(x["tokens_per_s"] for x in load(f"{work}/r{r}_dp1"))
    row = f"  {r:>5} {one:>11.0f}"
    for m in LAYOUTS:
        t = med(x["tokens_per_s"] for x in load(f"{work}/r{r}_{m}"))
        sp[m].append(t / one)
        row += f" {t:>10.0f} {t / one:>7.2f}x"
    print(row)
for m in LAYOUTS:
    xs = [x for r in range(1, rounds + 1) for x in load(f"{work}/r{r}_{m}")]
    line = (f"  dp={n} {m:>10}: median speedup {med(sp[m]):.2f}x | compute max/mean "
            f"{med(x['compute_max_over_mean'] for x in xs):.3f} | idle {100 * med(x['idle_fraction'] for x in xs):.1f}%"
            f" | attention pairs max/mean {med(x['attention_pairs_max_over_mean'] for x in xs):.3f}")
    if m.startswith("cad"):
        line += (f" -> {med(x['attention_pairs_served_max_over_mean'] for x in xs):.3f} after planning | "
                 f"{med(x.get('exchange_bytes_sent', 0) for x in xs) / 2**20:.1f} MiB sent per rank and step, "
                 f"exposed {100 * med(x.get('exchange_exposed_fraction', 0) for x in xs):.1f}%")
    print(line)
PY
