#!/usr/bin/env bash
# What Dual Chunk Attention is for: a model trained on short contexts, evaluated on
# documents several times longer, with causal attention (RoPE distances it never saw)
# and with DCA (every distance <= C, so within what it saw). Prints the mean loss per
# in-document position bin for both.
#
#   bash scripts/dca_demo.sh                 # about 2 minutes on 2 cores
#   STEPS=30 bash scripts/dca_demo.sh        # quick smoke run
#
# Data: the license texts every Debian system ships (/usr/share/common-licenses),
# byte-level. Training documents are paragraphs packed into TRAIN_LEN-token sequences
# (positions < TRAIN_LEN); evaluation documents are whole license files, EVAL_LEN
# tokens per sequence. DCA uses C = TRAIN_LEN - 1 (the largest distance trained on)
# and w = TRAIN_LEN / 8, with no retraining: core attention has no weights.
set -euo pipefail
cd "$(dirname "$0")/.."
LCT=${LCT:-build/lct}
OUT=${OUT:-runs/dca_demo}
STEPS=${STEPS:-400}
TRAIN_LEN=${TRAIN_LEN:-256}
EVAL_LEN=${EVAL_LEN:-2048}
EVAL_SEQUENCES=${EVAL_SEQUENCES:-8}
BIN=${BIN:-128}
CORPUS=${CORPUS:-/usr/share/common-licenses}
[ -x "$LCT" ] || { echo "dca_demo: no lct binary at $LCT (bash scripts/build.sh)" >&2; exit 1; }
[ -d "$CORPUS" ] || { echo "dca_demo: corpus folder $CORPUS not found (set CORPUS=...)" >&2; exit 1; }
mkdir -p "$OUT"
C=$((TRAIN_LEN - 1))
W=$((TRAIN_LEN / 8))

echo "== 1. train a causal model on ${TRAIN_LEN}-token sequences ($STEPS steps)"
"$LCT" train --data.source text --data.path "$CORPUS" --data.separator $'\n\n' \
  --data.seq_len "$TRAIN_LEN" --train.micro_batches 4 --train.steps "$STEPS" \
  --train.warmup_steps 20 --train.lr 0.002 --checkpoint.dir "$OUT/train" \
  --checkpoint.every "$STEPS" --checkpoint.keep 1 --checkpoint.overwrite true --train.log_every 50 \
  | grep -E "^(step|done)"
CKPT=$(ls "$OUT"/train/step_*.h5 | tail -1)

echo "== 2. $EVAL_SEQUENCES evaluation sequences of $EVAL_LEN tokens (whole files as documents)"
"$LCT" make-batch --data.source text --data.path "$CORPUS" --data.separator "" \
  --data.seq_len "$EVAL_LEN" --sequences "$EVAL_SEQUENCES" --train.seed 7 --out "$OUT/long.h5"

echo "== 3. evaluate: causal vs DCA (C $C, w $W, chunks of $((C - W)))"
"$LCT" eval --checkpoint "$CKPT" --batch-file "$OUT/long.h5" --position-bin "$BIN" \
  --per-position-out "$OUT/causal.csv"
"$LCT" eval --checkpoint "$CKPT" --batch-file "$OUT/long.h5" --position-bin "$BIN" \
  --attention.kernel dca --attention.dca_chunk_size "$C" --attention.dca_local_size "$W" \
  --per-position-out "$OUT/dca.csv"

echo "== mean loss (nats/byte) by in-document position; trained positions are < $TRAIN_LEN"
printf "%-13s %9s %9s %9s\n" "positions" "targets" "causal" "dca"
join -t, -j1 <(tail -n +2 "$OUT/causal.csv" | awk -F, '{printf "%08d,%s,%s,%s\n",$1,$2,$3,$4}') \
             <(tail -n +2 "$OUT/dca.csv" | awk -F, '{printf "%08d,%s\n",$1,$4}') |
  awk -F, '{printf "%5d-%-7d %9d %9.3f %9.3f\n", $1, $2, $3, $4, $5}'
echo "(per-position CSVs: $OUT/causal.csv, $OUT/dca.csv)"
