#!/usr/bin/env bash
# Core attention disaggregation over MPI against colocated attention on the same data:
#   - dp = 2 and dp = 4, causal and DCA, ping-pong nano-batches on and off (and a
#     batch of one-document micro-batches, whose second nano-batch is empty): 10 steps,
#     SGD, losses and parameters within compare_runs.py's float32 bounds of the single
#     process (no AdamW comparison: CAD moves query and key rows between ranks, so
#     key-gradient sums round differently, and AdamW turns that into differences no
#     rounding bound contains; see compare_runs.py);
#   - the plan balances: attention pairs max/mean after planning <= 1 + tolerance;
#   - the dp_balance = packing baseline (same global batch, re-packed) gives the same
#     loss and parameters as no balancing;
#   - with a measured cost model (lct bench --sections profile) CAD stays exact; a
#     profile of another model is refused, one of another machine warned about;
#   - dp = 2 x pp = 2 (same-phase ticks with dummy micro-batches) and dp = 2 x cp = 2
#     (context-parallel pieces planned like documents), causal and DCA, ping-pong on
#     and off; pp = 2 x cp = 2 and the contiguous cp split;
#   - a CAD checkpoint resumes colocated (placement is not part of the model);
#   - bad settings: one error line, clean exit.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers
export LCT_CACHE_DIR=$work/cache  # its own: the first run here measures the cost model

MODEL="$(model_keys 32 48 2 4 2) $SEQ128_DCA --train.threads 1 --train.warmup_steps 3"

train() {  # dir ranks micro_batches [extra args]
  local dir=$1 np=$2 mb=$3
  shift 3
  run_train "$dir" "$np" --train.steps 10 --train.micro_batches "$mb" "$@"
}

# dp = 2 balances the default cost model (measured kernel time, cached in
# $LCT_CACHE_DIR), dp = 4 attention pairs
cost_model() { [ "$1" = 4 ] && echo "--attention.cad_profile pairs"; true; }
for kernel in causal dca; do
  train "ref_$kernel" 0 4 $SGD --attention.kernel "$kernel"
  for dp in 2 4; do
    train "cad${dp}_$kernel" "$dp" $((4 / dp)) $SGD --attention.kernel "$kernel" --attention.placement cad \
      --attention.cad_pingpong true $(cost_model "$dp")
    compare "CAD dp=$dp $kernel, ping-pong" "cad${dp}_$kernel" "ref_$kernel"
    train "single${dp}_$kernel" "$dp" $((4 / dp)) $SGD --attention.kernel "$kernel" $(cost_model "$dp") \
      --attention.placement cad --attention.cad_pingpong false
    compare "CAD dp=$dp $kernel, one exchange at a time" "single${dp}_$kernel" "ref_$kernel"
  done
  # pipeline parallelism: same-phase ticks with dummy micro-batches, attention balanced
  # over all four ranks
  train "cadpp_$kernel" 4 2 $SGD --attention.kernel "$kernel" --attention.placement cad --parallel.pp 2 \
    --attention.cad_pingpong true
  compare "CAD dp=2 x pp=2 $kernel (same-phase ticks), ping-pong" "cadpp_$kernel" "ref_$kernel"
  train "cadpp_single_$kernel" 4 2 $SGD --attention.kernel "$kernel" --attention.placement cad \
    --parallel.pp 2 --attention.cad_pingpong false
  compare "CAD dp=2 x pp=2 $kernel (same-phase ticks), one exchange at a time" \
    "cadpp_single_$kernel" "ref_$kernel"
  # context parallelism: every rank's pieces planned like documents, key prefixes
  # assembled from the group's holders
  train "cadcp_$kernel" 4 2 $SGD --attention.kernel "$kernel" --attention.placement cad --parallel.cp 2 \
    --attention.cad_pingpong true
  compare "CAD dp=2 x cp=2 $kernel, ping-pong" "cadcp_$kernel" "ref_$kernel"
  train "cadcp_single_$kernel" 4 2 $SGD --attention.kernel "$kernel" --attention.placement cad \
    --parallel.cp 2 --attention.cad_pingpong false
  compare "CAD dp=2 x cp=2 $kernel, one exchange at a time" "cadcp_single_$kernel" "ref_$kernel"
  train "adam_ref_$kernel" 0 4 --attention.kernel "$kernel"
  train "adam_cad2_$kernel" 2 2 --attention.kernel "$kernel" --attention.placement cad
  # AdamW with CAD: its parameters are not compared with the single process (see the
  # header: eps 1e-8 amplifies the rounding of moved key-gradient sums, and with rank
  # speeds the plans follow the machine's timing). Step 1's loss is computed before any
  # update, so it equals the single process's within float32 summation (rtol 1e-6), and
  # training must make progress.
  /usr/bin/python3 - "adam_cad2_$kernel/metrics.jsonl" "adam_ref_$kernel/metrics.jsonl" <<'PY'
import json, sys
cad, ref = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert abs(cad[0]["loss"] - ref[0]["loss"]) <= 1e-6 * abs(ref[0]["loss"]), (cad[0]["loss"], ref[0]["loss"])
assert cad[-1]["loss"] < cad[0]["loss"], (cad[0]["loss"], cad[-1]["loss"])
print(f"ok   {sys.argv[1]}: AdamW with CAD, step 1 loss as one process, loss {cad[0]['loss']:.4f} -> {cad[-1]['loss']:.4f}")
PY
done
grep -q "core attention disaggregated (CAD) over all 4 ranks, tolerance 0.1, balancing attention pairs, ping-pong" cad4_causal.log
grep -q "attention.cad_pingpong = true on one host" cad4_causal.log
# the default cost model: measured by the first CAD run, then read from the cache
grep -q "balancing measured kernel time (measured now, .* s; cached in $LCT_CACHE_DIR/cad_profile-causal-h4-kv2-d8-t1-" cad2_causal.log
grep -q "balancing measured kernel time (cached $LCT_CACHE_DIR/cad_profile-causal-" single2_causal.log
grep -q "balancing measured kernel time (measured now" cad2_dca.log  # another kernel, another model
# a cached model that records another setup (here: threads) is measured again and replaced
cached=$(ls "$LCT_CACHE_DIR"/cad_profile-causal-*.toml)
sed -i 's/^threads = .*/threads = 64/' "$cached"
train cad2_stale 2 2 $SGD --attention.placement cad
grep -q "balancing measured kernel time (measured now" cad2_stale.log
grep -q "^threads = 1$" "$cached"
# ... and so is one that does not parse
echo "garbage" > "$cached"
train cad2_broken_cache 2 2 $SGD --attention.placement cad
grep -q "balancing measured kernel time (measured now" cad2_broken_cache.log
compare "CAD dp=2 after re-measuring its cost model" cad2_broken_cache ref_causal
# the grid follows the longest document piece (128 rows here: up to 256); a run of longer
# documents measures its longer grid and replaces the cached one, which the short runs
# then use
grep -qE "^q_grid = \[ *16, 64, 256 *\]$" "$cached" || { cat "$cached"; fail "cached grid of 128-token documents"; }
MODEL_128=$MODEL
MODEL=${MODEL/--data.seq_len 128 --data.max_doc_len 128/--data.seq_len 512 --data.max_doc_len 512}
run_train cad2_longer 2 --train.steps 1 $SGD --attention.placement cad
MODEL=$MODEL_128
grep -q "balancing measured kernel time (measured now" cad2_longer.log
grep -qE "^q_grid = \[ *16, 64, 256, 1024 *\]$" "$cached" || { cat "$cached"; fail "cached grid of 512-token documents"; }
run_train cad2_shorter 2 --train.steps 1 $SGD --attention.placement cad
grep -q "balancing measured kernel time (cached $LCT_CACHE_DIR/cad_profile-causal-" cad2_shorter.log
# "" is pairs, as configs written before "auto" hold it (their checkpoints resume)
train cad2_legacy 2 2 $SGD --attention.placement cad --attention.cad_profile ""
grep -q "balancing attention pairs" cad2_legacy.log
grep -q "one exchange at a time" single2_dca.log
grep -q "schedule ticks" cadpp_causal.log
grep -q "CAD plans every rank's pieces like documents" cadcp_dca.log
# pipeline x context parallelism x CAD (one rank per layer and half-sequence), and the
# naive contiguous split
train cadppcp 4 4 $SGD --attention.kernel dca --attention.placement cad --parallel.pp 2 --parallel.cp 2 \
  --attention.cad_pingpong true
compare "CAD pp=2 x cp=2 dca" cadppcp ref_dca
# (CAD replaces the context-parallel exchange: any parallel.cp_comm is accepted and unused)
train cadcp_contiguous 4 2 $SGD --attention.placement cad --parallel.cp 2 --parallel.cp_split contiguous \
  --parallel.cp_comm ulysses
compare "CAD dp=2 x cp=2 causal, contiguous split" cadcp_contiguous ref_causal
grep -q "(parallel.cp_comm is not used)" cadcp_contiguous.log
# the ticks schedule with colocated attention (dummies do nothing) is exact as well
train ticks_causal 2 4 $SGD --parallel.pp 2 --parallel.pp_schedule ticks
compare "colocated pp=2, ticks schedule" ticks_causal ref_causal
# ... also with context parallelism (no dummies run: nothing to serve)
train ticks_cp 4 4 $SGD --parallel.pp 2 --parallel.cp 2 --parallel.pp_schedule ticks
compare "colocated pp=2 x cp=2, ticks schedule" ticks_cp ref_causal

# attention.logit_scaling (DCA): the query factors are applied before CAD ships the
# queries, so servers need nothing of them; dp = 2 ping-pong and dp = 2 x cp = 2
LOGN="--attention.kernel dca --attention.logit_scaling logn_beyond --attention.logit_scaling_length 40"
train ref_logn 0 4 $SGD $LOGN
train cad2_logn 2 2 $SGD $LOGN --attention.placement cad --attention.cad_pingpong true
compare "CAD dp=2 dca, logit scaling logn_beyond, ping-pong" cad2_logn ref_logn
train cadcp_logn 4 2 $SGD $LOGN --attention.placement cad --parallel.cp 2
compare "CAD dp=2 x cp=2 dca, logit scaling logn_beyond" cadcp_logn ref_logn

# one-document micro-batches: every second nano-batch is empty and still takes part
train ref_long 0 4 $SGD --data.min_doc_len 128
train cad_long 2 2 $SGD --attention.placement cad --data.min_doc_len 128 --attention.cad_pingpong true
compare "CAD dp=2, ping-pong with empty nano-batches" cad_long ref_long

# a measured cost model: CAD balances kernel time and stays exact; a profile of another
# model shape is refused, one from another machine is used with a warning
"$LCT" bench --sections profile --profile-out profile.txt $MODEL > profile.log 2>&1 \
  || { cat profile.log; echo "FAIL: profile"; exit 1; }
grep -q "^seconds_per_pair = " profile.txt
train cad2_profile 2 2 $SGD --attention.placement cad --attention.cad_profile profile.txt
compare "CAD dp=2 with a measured cost model" cad2_profile ref_causal
grep -q "balancing measured kernel time (profile.txt)" cad2_profile.log
sed 's/^threads = .*/threads = 64/' profile.txt > other_machine.txt
train cad2_other 2 2 $SGD --attention.placement cad --attention.cad_profile other_machine.txt
grep -q "was measured with .* 64 threads" cad2_other.log
sed 's/^heads = .*/heads = 8/' profile.txt > other_model.txt

# the packing baseline re-packs the same global batch: same loss and parameters
for dp in 2 4; do
  train "packing$dp" "$dp" $((4 / dp)) $SGD --parallel.dp_balance packing --attention.kernel dca
  compare "dp_balance = packing, dp=$dp, dca" "packing$dp" ref_dca
done
train none2 2 2 $SGD --attention.kernel dca
compare "dp_balance = packing vs none, dp=2" packing2 none2
grep -q "data-parallel balance: packing" packing4.log
/usr/bin/python3 - cad4_causal/metrics.jsonl cad4_dca/metrics.jsonl <<'PY'
import json, sys
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path)]
    before = max(r["attention_pairs_max_over_mean"] for r in rows)
    after = max(r["attention_pairs_served_max_over_mean"] for r in rows)
    assert after <= 1.1 + 1e-9, (path, after)
    assert any(r["exchange_bytes_sent"] > 0 for r in rows), path
    print(f"ok   {path}: attention pairs max/mean before planning up to {before:.3f}, after up to {after:.3f}")
PY
h5ls cad2_dca/step_00000010.h5/metrics | grep -q attention_pairs_served_max_over_mean

# a CAD checkpoint continues colocated and the reverse (step 5 of 10)
train ck_cad 2 2 $SGD --attention.placement cad --checkpoint.every 5
mkdir -p to_colocated && cp ck_cad/step_00000005.h5 to_colocated/
train to_colocated 0 4 $SGD --train.resume auto
compare "CAD checkpoint resumed colocated" to_colocated ref_causal

# bad settings
expect_layout_error 2 "attention.cad_tolerance must be > 0" --attention.placement cad --attention.cad_tolerance 0
expect_layout_error 2 "attention.placement: unknown attention placement 'remote' (expected: colocated, cad" --attention.placement remote
MODEL=${MODEL/num_hidden_layers 2/num_hidden_layers 3} expect_layout_error 2 \
  "attention.placement = cad with pipeline parallelism needs the same number of layers" \
  --attention.placement cad --parallel.pp 2 --parallel.pp_layers 1,2
expect_layout_error 2 "parallel.dp_balance = packing is a baseline for colocated attention" \
  --attention.placement cad --parallel.dp_balance packing
expect_layout_error 2 "parallel.dp_balance: unknown data-parallel balance 'lpt' (expected: none, packing)" --parallel.dp_balance lpt
expect_layout_error 2 "attention.cad_profile: cannot open 'missing.txt'" \
  --attention.placement cad --attention.cad_profile missing.txt
expect_layout_error 2 "attention.cad_profile 'other_model.txt' was measured for causal attention with heads 8/2" \
  --attention.placement cad --attention.cad_profile other_model.txt
printf 'q_grid = [4, 2]\nkv_grid = [1]\n' > broken_profile.txt
expect_layout_error 2 "attention.cad_profile: CAD profile 'broken_profile.txt': q_grid must be ascending" \
  --attention.placement cad --attention.cad_profile broken_profile.txt
echo "mpi_cad: all passed"
