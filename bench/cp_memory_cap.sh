#!/usr/bin/env bash
# A context longer than one rank can hold trains under context parallelism within the
# same per-rank memory cap. Every process runs under `ulimit -v CAP` (address space,
# inherited by each MPI rank):
#   1. one rank trains sequences of LENGTH / 2 tokens (fits),
#   2. one rank fails on sequences of LENGTH tokens (out of memory: one error line),
#   3. cp = 2 (ring) trains sequences of LENGTH tokens, each rank under the same cap.
# The figures (steps, peak RSS per rank) come from lct's metrics.
#
#   bash bench/cp_memory_cap.sh [--cap-mib 2200] [--length 32768] [--steps 1]
#                               [--config configs/default.toml] [extra lct train args...]
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, MPI as root, $work, bench_options
bench_options "cap-mib=2200 length=32768 steps=1" "$@"
set -- "${BENCH_REST[@]}"

run() {  # label ranks length [extra args]; prints the outcome, returns lct's exit code
  local label=$1 np=$2 len=$3
  shift 3
  local rc=0
  (ulimit -v $((CAP_MIB * 1024)) && mpirun -np "$np" --bind-to core "$LCT" train --config "$CONFIG" \
      --train.threads 1 --data.seq_len "$len" --data.max_doc_len "$len" --data.doc_lengths fixed \
      --parallel.dp 1 --parallel.cp "$np" --train.steps "$STEPS" --checkpoint.every 0 \
      --checkpoint.dir "$work/$label" "$@") > "$work/$label.log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    PYTHONPATH=bench python3 - "$work/$label" "$label" "$len" "$np" <<'PY'
import sys
from throughput import load, wall_clock
d, label, length, np = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = load(d)
print(f"  {label:<12} {np} rank(s), {length:>6} tokens per sequence: trained {len(m)} steps, "
      f"peak RSS per rank {max(x['peak_rss_bytes'] for x in m) / 2**20:.0f} MiB, "
      f"{wall_clock(m, warmup=0)['tokens_per_s']:.0f} tok/s by wall clock over all steps, no warm-up")
PY
  else
    echo "  $label: $np rank(s), $len tokens per sequence: FAILED (exit $rc): $(grep -m1 'lct: error' "$work/$label.log" || tail -1 "$work/$label.log")"
  fi
  return $rc
}

echo "cp memory cap | config $CONFIG | ulimit -v $CAP_MIB MiB per process | one document per sequence"
run one_half 1 $((LENGTH / 2)) "$@"; half=$?
run one_full 1 "$LENGTH" "$@"; full=$?
run cp2_full 2 "$LENGTH" --parallel.cp_comm ring "$@"; cp=$?
if [ $half = 0 ] && [ $full != 0 ] && [ $cp = 0 ]; then
  echo "  => under $CAP_MIB MiB per process, one rank trains $((LENGTH / 2)) tokens but not $LENGTH; cp = 2 trains $LENGTH"
else
  echo "  => cap $CAP_MIB MiB does not separate the cases (half $half, full $full, cp2 $cp): adjust --cap-mib"
  exit 1
fi
