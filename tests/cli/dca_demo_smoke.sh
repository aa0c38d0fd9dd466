#!/usr/bin/env bash
# scripts/dca_demo.sh end to end at tiny settings (make-batch, eval with attention
# overrides and per-position loss): both per-position tables cover every bin, and
# for positions below the training length DCA equals causal attention (C = TRAIN_LEN - 1,
# so every distance there is exact).
set -euo pipefail
LCT=$1
SRC=$2
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
LCT=$LCT OUT=$work STEPS=6 TRAIN_LEN=64 EVAL_LEN=256 EVAL_SEQUENCES=2 BIN=32 \
  bash "$SRC/scripts/dca_demo.sh" > "$work/log.txt"
python3 - "$work" <<'PY'
import csv, sys
d = sys.argv[1]
rows = {k: list(csv.DictReader(open(f"{d}/{k}.csv"))) for k in ("causal", "dca")}
for k, r in rows.items():
    assert [int(x["position_begin"]) for x in r] == list(range(0, 256, 32)), (k, r)
    assert sum(int(x["targets"]) for x in r) > 0, (k, r)
for c, a in zip(rows["causal"], rows["dca"]):
    if int(c["position_end"]) <= 64:  # inside the trained length: identical attention
        assert abs(float(c["mean_loss"]) - float(a["mean_loss"])) < 1e-4, (c, a)
print("dca_demo_smoke: ok")
PY
grep -q "attention dca (C 63, w 8)" "$work/log.txt"
