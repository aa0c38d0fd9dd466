#!/usr/bin/env bash
# train.recompute = selective and full (and recompute_layers = 1) give bit-identical
# losses and parameters to none after 6 AdamW steps (compare_runs.py with tolerance 0:
# AdamW turns any last-bit difference into a visible one, so this is the strict test),
# on one process, dp = 2, pp = 2, cp = 2 (ring and Ulysses), CAD on dp = 2 (one exchange
# at a time and ping-pong), fp32 and bf16, causal and (on a subset) DCA, and pp = 2 x CAD
# (same-phase ticks, below). Token tiles of 96 rows split every micro-batch into several
# tiles with a ragged last one (256 tokens; 128 per rank under cp = 2).
# CAD plans by attention pairs here (attention.cad_profile = pairs): a plan by measured
# time differs between any two runs, recomputing or not.
# Then what a mode keeps: the log's and metrics.jsonl's stored bytes per token fall from
# none to selective to full, and --dry-run states them; bad settings are one-line errors.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

MODEL="$(model_keys 64 96 2 4 2) --data.seq_len 256
  --data.max_doc_len 256 --train.threads 1 --train.warmup_steps 2
  --train.tile_tokens 96 --attention.dca_chunk_size 80 --attention.dca_local_size 16
  --attention.cad_profile pairs"

layout() {  # label ranks args...: none, selective, full (and full on layer 0 only) equal
  local label=$1 np=$2
  shift 2
  run_train "${label}_none" "$np" --train.steps 6 "$@"
  for mode in selective full; do
    run_train "${label}_$mode" "$np" --train.steps 6 --train.recompute "$mode" "$@"
    compare "$label: $mode vs none" "${label}_none" "${label}_$mode" 0 0
  done
  rm -rf "${label}"_*
}

for precision in fp32 bf16; do
  P=(--train.precision "$precision")
  layout "one_$precision" 0 --train.micro_batches 2 "${P[@]}"
  layout "dp2_$precision" 2 "${P[@]}"
  layout "pp2_$precision" 2 --parallel.pp 2 --train.micro_batches 3 "${P[@]}"
  layout "cp2_ring_$precision" 2 --parallel.cp 2 "${P[@]}"
  layout "cp2_ulysses_$precision" 2 --parallel.cp 2 --parallel.cp_comm ulysses "${P[@]}"
  layout "cad_dp2_$precision" 2 --attention.placement cad --attention.cad_pingpong false "${P[@]}"
  layout "cad_dp2_pingpong_$precision" 2 --attention.placement cad --attention.cad_pingpong true "${P[@]}"
done
# pp = 2 x CAD (same-phase ticks): full repeats attention in a backward tick, whose CAD
# plan (of that tick's micro-batches) cuts documents into other tasks than the forward
# tick's plan did; plans cut only at multiples of the kernel's query tile and the tiles
# follow in-document positions, so the repeated O and LSE are the same bits (bf16 too)
PPCAD=(--parallel.pp 2 --attention.placement cad --train.micro_batches 2 --train.steps 6)
for precision in fp32 bf16; do
  run_train "pp2_cad_none_$precision" 2 "${PPCAD[@]}" --train.precision $precision
  for mode in selective full; do
    run_train "pp2_cad_${mode}_$precision" 2 "${PPCAD[@]}" --train.precision $precision --train.recompute $mode
    compare "pp2 x CAD $precision: $mode vs none" "pp2_cad_none_$precision" "pp2_cad_${mode}_$precision" 0 0
  done
done
# (DCA with attention.logit_scaling: the query factors come from the same positions in
# the recomputed forward)
DCA=(--attention.kernel dca --attention.logit_scaling logn --attention.logit_scaling_length 64)
layout one_dca 0 --train.micro_batches 2 "${DCA[@]}"
layout cp2_ring_dca 2 --parallel.cp 2 "${DCA[@]}"
layout cad_dp2_pingpong_dca 2 --attention.placement cad --attention.cad_pingpong true "${DCA[@]}"
run_train partial_none 0 --train.steps 6
run_train partial_full1 0 --train.steps 6 --train.recompute full --train.recompute_layers 1
compare "full on layer 0 only vs none" partial_none partial_full1 0 0

# stored bytes per token: in the log, in metrics.jsonl and in --dry-run, falling with
# the mode (shorter runs)
for mode in none selective full; do
  run_train "bytes_$mode" 0 --train.recompute "$mode" --train.steps 2
  grep -q "recompute $mode" "bytes_$mode.log" || { cat "bytes_$mode.log"; echo "FAIL: the log does not name recompute $mode"; exit 1; }
  "$LCT" train $MODEL --train.recompute "$mode" --dry-run > "dry_$mode.txt"
  grep -q "stored per token" "dry_$mode.txt" || { cat "dry_$mode.txt"; echo "FAIL: --dry-run without stored bytes per token"; exit 1; }
done
/usr/bin/python3 - <<'PY'
import json
per = {}
for mode in ("none", "selective", "full"):
    rec = [json.loads(l) for l in open(f"bytes_{mode}/metrics.jsonl")]
    a, s = rec[-1]["activation_bytes_per_token"], rec[-1]["scratch_bytes_per_token"]
    assert a > 0 and s > 0, (mode, rec[-1])
    per[mode] = (a, s)
assert per["full"][0] < per["selective"][0] < per["none"][0], per
print("ok   stored activation bytes per token: " + ", ".join(f"{m} {a:.0f} + scratch {s:.0f}" for m, (a, s) in per.items()))
PY

expect_error() {  # message args...
  local msg=$1 out rc=0
  shift
  out=$("$LCT" train $MODEL --checkpoint.dir bad --dry-run "$@" 2>&1) || rc=$?
  [ "$rc" = 1 ] || { echo "$out"; echo "FAIL: exit $rc, expected 1"; exit 1; }
  grep -q -- "$msg" <<< "$out" || { echo "$out"; echo "FAIL: missing '$msg'"; exit 1; }
  [ "$(wc -l <<< "$out")" = 1 ] || { echo "$out"; echo "FAIL: not one line"; exit 1; }
  echo "ok   error: $msg"
}
expect_error "train.recompute" --train.recompute sometimes
expect_error "train.recompute_layers must be in 0..model.num_hidden_layers = 2, got 3" --train.recompute full --train.recompute_layers 3
expect_error "train.recompute_layers" --train.recompute full --train.recompute_layers -1
expect_error "needs train.recompute = selective or full" --train.recompute_layers 1
expect_error "train.tile_tokens" --train.tile_tokens 0
echo "mpi_recompute: all passed"
