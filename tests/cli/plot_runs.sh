#!/usr/bin/env bash
# scripts/plot_runs.py: two short runs (a folder and a checkpoint) in one PNG; a missing
# run and a --names count that does not match are one-line errors.
set -euo pipefail
LCT=$1
SRC=$2
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
MODEL="$(model_keys 32 48 1 2 1) --data.seq_len 64 --train.steps 3"
"$LCT" train $MODEL --checkpoint.dir a > a.log 2>&1 || { cat a.log; exit 1; }
"$LCT" train $MODEL --checkpoint.dir b --train.lr 1e-2 > b.log 2>&1 || { cat b.log; exit 1; }
/usr/bin/python3 "$SRC/scripts/plot_runs.py" a b/step_00000003.h5 --names lr3e-3,lr1e-2 --out p.png
[ -s p.png ] && head -c 8 p.png | grep -q PNG || { echo "FAIL: no PNG"; exit 1; }
out=$(/usr/bin/python3 "$SRC/scripts/plot_runs.py" missing --out q.png 2>&1) && { echo "FAIL: missing run accepted"; exit 1; }
grep -q "plot_runs: missing: no such file" <<< "$out" || { echo "$out"; exit 1; }
out=$(/usr/bin/python3 "$SRC/scripts/plot_runs.py" a b --names one --out q.png 2>&1) && { echo "FAIL: bad --names accepted"; exit 1; }
grep -q "has 1 names for 2 runs" <<< "$out" || { echo "$out"; exit 1; }
echo "plot_runs: all passed"
