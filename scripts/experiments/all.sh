#!/usr/bin/env bash
# Runs every experiment of scripts/experiments/ into one folder (CSV, markdown, PNG
# each) and gathers their markdown tables in DIR/README.md.
#
#   bash scripts/experiments/all.sh [--quick] [--out results]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=results
QUICK=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=(--quick); shift ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "all.sh: unknown option '$1' (expected --quick, --out DIR)" >&2; exit 1 ;;
  esac
done
mkdir -p "$OUT"
: > "$OUT/README.md"
for e in stragglers cad_ablations placements memory recompute attention_kernel masks block_sparse dca_extrapolation cp_methods passkey; do
  start=$(date +%s)
  echo "== $e"
  # its output in OUT/e.log; its heartbeat lines (an lct run longer than LCT_HEARTBEAT_S,
  # default 30 s: scripts/experiments/common.py) shown as they come
  /usr/bin/python3 "scripts/experiments/$e.py" "${QUICK[@]}" --out "$OUT/$e" 2>&1 | tee "$OUT/$e.log" \
    | { grep --line-buffered -E "^$e: run [0-9]+ " || true; } \
    || { cat "$OUT/$e.log"; echo "all.sh: $e failed" >&2; exit 1; }
  { cat "$OUT/$e/$e.md"; echo; echo "![$e]($e/$e.png)"; echo; } >> "$OUT/README.md"
  echo "   $(( $(date +%s) - start )) s: $OUT/$e/$e.csv, .md, .png"
done
echo "all.sh: tables in $OUT/README.md"
