#!/usr/bin/env bash
# Data parallelism over MPI, against the single-process run on the same global batch:
#   - dp = 2 and dp = 4 (oversubscribed) match dp = 1 with the same global batch for
#     10 SGD steps, within compare_runs.py's float32 bounds;
#   - bucketed overlap on and off, and bucket sizes that do not divide the model, agree
#     with dp = 1 (SGD) and, with AdamW, bit for bit with dp = 2 (a bucket's sum over
#     ranks is the same sum whatever the bucket boundaries or the overlap);
#   - a checkpoint written under dp = 2 resumes under dp = 1 and vice versa;
#   - invalid layouts give one clear error and a clean exit on every rank, never a hang;
#   - killing one rank mid-run ends the whole job with a message within seconds;
#   - ranks started with different settings (MPMD) stop together within seconds, with one
#     line naming the first differing key, or the one rank's error.
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

MODEL="$(model_keys 64 96 2 4 2) --data.seq_len 256
  --data.max_doc_len 256 --train.threads 1 --train.warmup_steps 3"

train() {  # dir ranks micro_batches steps [extra args]
  local dir=$1 np=$2 mb=$3 steps=$4
  shift 4
  run_train "$dir" "$np" --train.micro_batches "$mb" --train.steps "$steps" "$@"
}

# same global batch of 4 sequences per step (dp1 and dp2 keep step 5 too, which the
# checkpoint moves below resume)
train dp1 0 4 10 $SGD --checkpoint.every 5
train dp2 2 2 10 $SGD --checkpoint.every 5
train dp4 4 1 10 $SGD
grep -q "MPI: 4 ranks = dp 4 x pp 1 x cp 1" dp4.log
grep -q "compute max/mean" dp2.log
compare "dp=2 vs dp=1" dp2 dp1
compare "dp=4 vs dp=1" dp4 dp1
train dp2_blocking 2 2 10 $SGD --parallel.overlap_grad_reduce false
compare "dp=2 overlap off vs dp=1" dp2_blocking dp1
train dp2_odd_buckets 2 2 10 $SGD --parallel.bucket_size 777
grep -q "gradient buckets: " dp2_odd_buckets.log
compare "dp=2 bucket_size 777 vs dp=1" dp2_odd_buckets dp1
train dp2_one_bucket 2 2 10 $SGD --parallel.bucket_size 100000000
compare "dp=2 one bucket vs dp=1" dp2_one_bucket dp1
# AdamW: overlap and bucket boundaries change no sum, so dp = 2 agrees with itself exactly
train adam_dp2 2 2 10
train adam_dp2_blocking 2 2 10 --parallel.overlap_grad_reduce false
compare "AdamW dp=2 overlap off vs on" adam_dp2_blocking adam_dp2 0 0
train adam_dp2_odd_buckets 2 2 10 --parallel.bucket_size 777
compare "AdamW dp=2 bucket_size 777 vs default buckets" adam_dp2_odd_buckets adam_dp2 0 0
# straggler columns reach the metrics file and the checkpoint's history
grep -q '"idle_fraction"' dp2/metrics.jsonl
h5ls dp2/step_00000010.h5/metrics | grep -q compute_max_over_mean

# checkpoints move between layouts: the step-5 checkpoint of a 10-step run under
# dp=2 continues under dp=1, and vice versa, ending where dp=1 alone ends
mkdir -p x21b && cp dp2/step_00000005.h5 x21b/
train x21b 0 4 10 $SGD --train.resume auto
compare "resume dp=2 checkpoint under dp=1" x21b dp1
mkdir -p x12b && cp dp1/step_00000005.h5 x12b/
train x12b 2 2 10 $SGD --train.resume auto
compare "resume dp=1 checkpoint under dp=2" x12b dp1

# ranks that disagree (an MPMD launch: each rank its own arguments) stop together: one
# line, exit non-zero, within 30 s, for any key, an invalid value or an unknown option
# on one rank only
expect_mpmd_error() {  # message, rank 1's arguments (MODEL and --train.steps 3 unless given)
  local msg=$1 second=$2 out rc=0 start
  start=$(date +%s)
  out=$(timeout 60 mpirun --oversubscribe --bind-to none -np 1 "$LCT" train $MODEL --train.steps 3 \
        --checkpoint.dir mpmd : -np 1 "$LCT" train $second --checkpoint.dir mpmd 2>&1) || rc=$?
  if [ "$rc" = 0 ] || [ "$rc" = 124 ] || (( $(date +%s) - start > 30 )); then
    echo "$out"; echo "FAIL: MPMD '$msg': rc=$rc after $(( $(date +%s) - start )) s"; exit 1
  fi
  grep -q -- "$msg" <<< "$out" || { echo "$out"; echo "FAIL: MPMD: missing '$msg'"; exit 1; }
  [ "$(echo "$out" | grep -c "lct: error")" = 1 ] || { echo "$out"; echo "FAIL: MPMD '$msg': not one line"; exit 1; }
  echo "ok   MPMD: $(echo "$out" | grep "lct: error")"
}
expect_mpmd_error "ranks disagree: train.seed = 1234 on rank 0 but 7 on rank 1" "$MODEL --train.steps 3 --train.seed 7"
expect_mpmd_error "ranks disagree: data.seq_len = 256 on rank 0 but 128 on rank 1" \
  "${MODEL/data.seq_len 256/data.seq_len 128} --train.steps 3"
expect_mpmd_error "ranks disagree: model.hidden_size = 64 on rank 0 but 32 on rank 1" \
  "${MODEL/hidden_size 64/hidden_size 32} --train.steps 3"
expect_mpmd_error "ranks disagree: train.steps = 3 on rank 0 but 4 on rank 1" "$MODEL --train.steps 4"
expect_mpmd_error "rank 1 of 2: train.lr must be > 0" "$MODEL --train.steps 3 --train.lr -1"
expect_mpmd_error "rank 1 of 2: The following argument was not expected: --bogus" "$MODEL --train.steps 3 --bogus"
expect_mpmd_error "ranks disagree: command = train on rank 0 but --help on rank 1" "--help"
[ ! -e mpmd ] || { echo "FAIL: a refused MPMD run created its folder"; exit 1; }
# the same data.path holding other bytes of the same size on each rank (two working
# folders, as on two hosts): compared by content (reliability round 3, cause 15)
mkdir -p wd0 wd1
/usr/bin/python3 -c "
import numpy as np
for i in (0, 1):
    np.random.default_rng(i).integers(0, 200, 4096).astype(np.uint16).tofile(f'wd{i}/tokens.bin')"
out=$(timeout 60 mpirun --oversubscribe --bind-to none -np 1 --wdir wd0 "$LCT" train $MODEL --train.steps 1 \
      --data.source tokens --data.path tokens.bin --checkpoint.dir ck : -np 1 --wdir wd1 "$LCT" train $MODEL \
      --train.steps 1 --data.source tokens --data.path tokens.bin --checkpoint.dir ck 2>&1) && rc=0 || rc=$?
grep -q "ranks disagree: data file content = xxh64:" <<< "$out" && [ "$rc" != 0 ] && [ "$rc" != 124 ] \
  || { echo "$out"; echo "FAIL: token files of one size and other content trained together (rc=$rc)"; exit 1; }
echo "ok   MPMD: $(echo "$out" | grep "lct: error")"

# invalid layouts: one message (from rank 0), non-zero exit, quickly
expect_layout_error 2 "= 3 but the MPI world has 2 ranks" --parallel.dp 3
expect_layout_error 3 "parallel.pp = 3 must divide model.num_hidden_layers = 2" --parallel.pp 3
expect_layout_error 2 "parallel.dp must be a positive degree or -1" --parallel.dp 0
expect_layout_error 2 "parallel.dp must be >= -1" --parallel.dp -2
expect_layout_error 4 "only one of parallel.dp/pp/cp may be -1" --parallel.pp -1
expect_layout_error 3 "data.seq_len = 256 must be a multiple of 2 x parallel.cp = 6" \
  --parallel.dp 1 --parallel.cp 3

# a rank killed mid-run ends the job with a message, within seconds
expect_job_ends_when_a_rank_dies 2
echo "mpi_data_parallel: all passed"
