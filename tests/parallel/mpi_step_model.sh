#!/usr/bin/env bash
# The step model (src/train/step_model.h): `lct simulate` predicts a step from the same
# per-rank batches `lct train` trains. For dp, pp, cp and CAD layouts (and dp balance
# packing, and a mask), every rank's tokens and attention pairs of every step in
# metrics.jsonl (what the trainer ran, gathered from every rank) equal the simulator's
# prediction of the same steps (simulate --json "steps"), exactly: both are integer
# counts of the same documents. So do the bytes each rank's exchange sent
# (rank_exchange_bytes) where the simulator prices them exactly: no exchange, the ring,
# the all-gather and the double ring, under masks, bf16 and full recomputation, and CAD
# in fp32 without context parallelism or full recomputation.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

MODEL="$TINY_MODEL --data.seq_len 256 --data.max_doc_len 200 --data.doc_lengths pretrain --train.micro_batches 2"
STEPS=3

check() {  # name ranks args...: train and simulate the layout, compare per-rank counts
  local name=$1 np=$2
  shift 2
  run_train "$name" "$np" --train.steps $STEPS "$@"
  "$LCT" simulate $MODEL --ranks "$np" --steps $STEPS --tflops 1 --json "$@" > "$name.sim.json" 2> "$name.sim.log" \
    || { cat "$name.sim.log"; echo "FAIL: simulate $name"; exit 1; }
  /usr/bin/python3 - "$name" <<'PY'
import json, sys
name = sys.argv[1]
ran = [json.loads(l) for l in open(f"{name}/metrics.jsonl")]
sim = json.load(open(f"{name}.sim.json"))["steps"]
assert len(ran) == len(sim), (name, len(ran), len(sim))
exact_bytes = "rank_exchange_bytes" in sim[0]
for k, (r, s) in enumerate(zip(ran, sim)):
    for key in ("rank_tokens", "rank_attention_pairs") + (("rank_exchange_bytes",) if exact_bytes else ()):
        if r[key] != s[key]:
            sys.exit(f"FAIL: {name} step {k + 1} {key}: trained {r[key]}, simulated {s[key]}")
    assert sum(r["rank_tokens"]) > 0
print(f"ok   {name}: per-rank tokens, attention pairs{' and exchange bytes' if exact_bytes else ''} of {len(ran)} "
      f"steps as simulated (step 1: tokens {ran[0]['rank_tokens']}, pairs {ran[0]['rank_attention_pairs']}"
      + (f", bytes {ran[0]['rank_exchange_bytes']})" if exact_bytes else ")"))
PY
}

check dp2 2 --parallel.dp 2
check packing2 2 --parallel.dp 2 --parallel.dp_balance packing
check pp2 2 --parallel.dp 1 --parallel.pp 2
check cp2 2 --parallel.dp 1 --parallel.cp 2
check cp2_window 2 --parallel.dp 1 --parallel.cp 2 --attention.mask sliding_window --attention.window 32
# the bytes each rank's exchange sends: the rows the mask lets its peers read (data/key_runs.h)
check cp2_allgather_sinks 2 --parallel.dp 1 --parallel.cp 2 --parallel.cp_comm allgather \
  --attention.mask sink_window --attention.window 24 --attention.sink_tokens 3
check cp4_window_bf16_full 4 --parallel.dp 1 --parallel.cp 4 --attention.mask sliding_window --attention.window 24 \
  --train.precision bf16 --train.recompute full
check cp4_double_ring 4 --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm double_ring --parallel.cp_inner_ring 2 \
  --attention.mask chunked --attention.block_size 40
# the relay's hops carry the rows the ranks ahead read (data/relay_rows.h), in bf16 here
check cp4_double_ring_window_bf16 4 --parallel.dp 1 --parallel.cp 4 --parallel.cp_comm double_ring \
  --parallel.cp_inner_ring 2 --attention.mask sliding_window --attention.window 24 --train.precision bf16
check cad2 2 --parallel.dp 2 --attention.placement cad --attention.cad_profile pairs
# CAD's bytes too, in fp32 without context parallelism (each key row has one holder): a
# window's tasks fetch only the keys they read; ping-pong's two nano-batches
check cad2_window_pingpong 2 --parallel.dp 2 --attention.placement cad --attention.cad_profile pairs \
  --attention.mask sink_window --attention.window 24 --attention.sink_tokens 3 --attention.cad_pingpong true
check cad2_pp2 4 --parallel.dp 2 --parallel.pp 2 --attention.placement cad --attention.cad_profile pairs
check cad2_cp2 4 --parallel.dp 2 --parallel.cp 2 --attention.placement cad --attention.cad_profile pairs
check dp2_pp2 4 --parallel.dp 2 --parallel.pp 2
