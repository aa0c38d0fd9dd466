#!/usr/bin/env bash
# train.recompute = selective and full against none on this machine, one process with
# every core (train.threads 0), in one script run. Two workloads at --long tokens per
# sequence (default 16K): one document of that length per step, and the config's
# document-length mix packed into sequences of that length (documents up to the same
# length). The three modes alternate for --rounds rounds; each round's cost is the ratio
# of a mode's wall-clock time per token to none's in the same round (bench/throughput.py:
# total tokens over total time of the steps after the first two), and the figure is the
# median over rounds with their range. Also each mode's stored and scratch bytes per
# token and its peak activation bytes (metrics.jsonl).
#
#   bash bench/recompute.sh [--config configs/default.toml] [--steps 6] [--rounds 3]
#                           [--long 16384] [extra lct train args, e.g. --train.precision bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, $work, bench_options, bench_one, bench_setting
bench_options "steps=6 rounds=3 long=16384" "$@"
set -- "${BENCH_REST[@]}"

one_document_args "$LONG"
MIX=(--data.seq_len "$LONG" --data.max_doc_len "$LONG")
echo "recompute | config $CONFIG | $ROUNDS rounds x $STEPS steps at $LONG tokens | one process, all cores | $*"
lscpu | grep -E "^Model name" | sed 's/  */ /g'
bench_one "$work/warm" --train.steps 1 "$@"  # per-machine caches, outside the rounds
for r in $(seq "$ROUNDS"); do
  for mode in none selective full; do
    bench_setting "r${r}_one_$mode" train.recompute "$mode" "${ONE_DOCUMENT[@]}" "$@"
    bench_setting "r${r}_mix_$mode" train.recompute "$mode" "${MIX[@]}" "$@"
  done
done
grep -m1 "lct train |" "$work/r1_one_none.log"
PYTHONPATH=bench python3 - "$work" "$ROUNDS" <<'PY'
import statistics, sys
from throughput import load, wall_clock
work, rounds = sys.argv[1], int(sys.argv[2])
print("  throughput = total tokens / total wall-clock time of steps 3.. of each run; cost = none's tok/s / the mode's")
for name, label in (("one", "one document per sequence"), ("mix", "the config's length mix")):
    print(f"  {label}:")
    print(f"  {'round':>5} {'none tok/s':>11} {'selective':>10} {'full':>10}")
    cost = {"selective": [], "full": []}
    for r in range(1, rounds + 1):
        t = {m: wall_clock(load(f"{work}/r{r}_{name}_{m}"))["tokens_per_s"] for m in ("none", "selective", "full")}
        for m in cost:
            cost[m].append(t["none"] / t[m])
        print(f"  {r:>5} {t['none']:>11.0f} {t['none'] / t['selective']:>9.3f}x {t['none'] / t['full']:>9.3f}x")
    for m, c in cost.items():
        print(f"  {m} / none step time: {statistics.median(c):.3f}x (rounds {min(c):.3f}-{max(c):.3f})")
    for m in ("none", "selective", "full"):
        last = load(f"{work}/r1_{name}_{m}")[-1]
        print(f"  {m:>9}: stored {last['activation_bytes_per_token'] / 1024:.1f} KiB/token, scratch "
              f"{last['scratch_bytes_per_token'] / 1024:.1f} KiB/token, peak activations "
              f"{last['peak_activation_bytes'] / 2**20:.0f} MiB")
PY
