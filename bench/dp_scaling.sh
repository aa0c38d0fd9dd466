#!/usr/bin/env bash
# Data-parallel scaling on this machine, one rank per core, in one run:
# tokens/s of dp = 1 (1 rank, 1 thread) against dp = N (N ranks, 1 thread each) on the
# same config and per-rank batch, medians over the steps after the first two.
#
#   bash bench/dp_scaling.sh [--config configs/default.toml] [--steps 12] [--ranks 2]
#                            [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
LCT=${LCT:-build/lct}
CONFIG=configs/default.toml
STEPS=12
RANKS=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --config) CONFIG=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    *) break ;;
  esac
done
[ -x "$LCT" ] || { echo "dp_scaling: no lct binary at $LCT (bash scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "${KEEP:-}" ] && trap - EXIT && echo "runs kept in $work"

run() {  # ranks [extra args]
  local np=$1
  shift
  mpirun -np "$np" --bind-to core "$LCT" train --config "$CONFIG" --train.threads 1 \
    --train.steps "$STEPS" --checkpoint.every 0 --checkpoint.dir "$work/dp$np" "$@" \
    > "$work/dp$np.log" 2>&1 || { cat "$work/dp$np.log"; exit 1; }
}
median_tps() {  # dir
  python3 -c "
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + '/metrics.jsonl')][2:]
print(statistics.median(r['tokens_per_s'] for r in rows), statistics.median(r['compute_max_over_mean'] for r in rows), statistics.median(r['idle_fraction'] for r in rows))
" "$1"
}
echo "dp scaling | config $CONFIG | $STEPS steps | one rank per core, 1 thread each"
run 1 "$@"
grep -m1 "lct train |" "$work/dp1.log"
run "$RANKS" "$@"
grep -m1 "MPI:" "$work/dp$RANKS.log"
read -r t1 c1 i1 < <(median_tps "$work/dp1")
read -r tn cn in < <(median_tps "$work/dp$RANKS")
printf "  dp=1       %9.0f tokens/s\n" "$t1"
printf "  dp=%-7s %9.0f tokens/s   compute max/mean %.3f   idle %.1f%%\n" "$RANKS" "$tn" "$cn" "$(python3 -c "print(100*$in)")"
printf "  speedup    %9.2fx (ideal %d)\n" "$(python3 -c "print($tn/$t1)")" "$RANKS"
