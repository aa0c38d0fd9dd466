#!/usr/bin/env bash
# Bad input gets a clear one-line error naming the key, file or value, and a non-zero
# exit. Each case: expected substring, then the lct arguments.
set -uo pipefail
LCT=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0

expect_error() {
  local want=$1
  shift
  local err
  err=$("$LCT" "$@" 2>&1 >/dev/null)
  local rc=$?
  if [[ $rc -ne 1 ]]; then  # the documented exit code of every bad input
    echo "FAIL (exit $rc, expected 1): lct $*"; failures=$((failures + 1)); return
  fi
  if [[ "$err" != *"$want"* ]]; then
    echo "FAIL (message): lct $*"; echo "  wanted: $want"; echo "  got:    $err"
    failures=$((failures + 1)); return
  fi
  if [[ $(printf '%s\n' "$err" | grep -c .) -ne 1 ]]; then
    echo "FAIL (not one line): lct $*"; echo "$err"; failures=$((failures + 1)); return
  fi
  echo "ok: $want"
}

printf '[model]\nhidden_sise = 64\n' > typo.toml
printf '[train]\nsteps = "many"\n' > type.toml
printf '[train\n' > broken.toml
printf '[parallel]\npp_layers = "3,5"\n' > list_type.toml
mkdir empty_corpus && touch empty_corpus/a.txt
: > empty.bin
printf "some text" > ok.txt

expect_error "unknown key 'model.hidden_sise'" train --config typo.toml
expect_error "train.steps must be an integer" train --config type.toml
expect_error "broken.toml'" train --config broken.toml
expect_error "--model.hiden_size" train --model.hiden_size 3
expect_error "train.lr must be a number, got 'fast'" train --train.lr fast
expect_error "parallel.pp_layers must be a list of integers like [3, 5], got '3,x'" train --parallel.pp_layers 3,x
expect_error "parallel.pp_layers must be a list of integers" train --config list_type.toml
expect_error "parallel.pp_schedule: unknown pipeline schedule 'zb'" train --parallel.pp_schedule zb
expect_error "parallel.pp_layers has 2 entries but parallel.pp = 1" train --parallel.pp_layers 2,2
expect_error "data.doc_lengths" train --data.doc_lengths zipf
expect_error "model.num_key_value_heads (3) must divide" train --model.num_key_value_heads 3
expect_error "data.path is required" train --data.source text
expect_error "data.path '$work/missing.txt': no such file" train --data.source text --data.path "$work/missing.txt"
expect_error "no non-empty documents" train --data.source text --data.path empty_corpus
expect_error "no non-empty documents" train --data.source tokens --data.path empty.bin
expect_error "model.vocab_size (100) is smaller than the data's vocabulary (256" \
  train --data.source text --data.path typo.toml --model.vocab_size 100
expect_error "no such file" eval --checkpoint nope.h5 --batch-file nope.h5
expect_error "not a readable HDF5 file" eval --checkpoint typo.toml --batch-file typo.toml

# a batch file with inconsistent cu_seqlens, against a real checkpoint
"$LCT" train --model.hidden_size 32 --model.intermediate_size 32 --model.num_hidden_layers 1 \
  --model.num_attention_heads 2 --model.num_key_value_heads 1 --data.seq_len 64 --train.steps 1 \
  --checkpoint.dir ck > /dev/null || { echo "FAIL: tiny train"; exit 1; }
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
with h5py.File("bad_cu.h5", "w") as f:
    f["tokens"] = np.arange(10, dtype=np.int32)
    f["cu_seqlens"] = np.array([0, 6, 4, 10], dtype=np.int32)
with h5py.File("short_cu.h5", "w") as f:
    f["tokens"] = np.arange(10, dtype=np.int32)
    f["cu_seqlens"] = np.array([0, 6], dtype=np.int32)
PY
expect_error "bad_cu.h5: cu_seqlens must be strictly increasing" eval --checkpoint ck/step_00000001.h5 --batch-file bad_cu.h5
expect_error "short_cu.h5: cu_seqlens ends at 6 but there are 10 tokens" eval --checkpoint ck/step_00000001.h5 --batch-file short_cu.h5
/usr/bin/python3 -c "
import h5py, numpy as np
with h5py.File('ok.h5', 'w') as f:
    f['tokens'] = np.arange(10, dtype=np.int32)
    f['cu_seqlens'] = np.array([0, 10], dtype=np.int32)"
/usr/bin/python3 -c "
import h5py, numpy as np
for name, mask in (('mask_values.h5', [0, 1, 2, 0, 0, 0, 0, 0, 0, 0]), ('mask_shape.h5', [0, 1])):
    with h5py.File(name, 'w') as f:
        f['tokens'] = np.arange(10, dtype=np.int32)
        f['cu_seqlens'] = np.array([0, 10], dtype=np.int32)
        f['answer_mask'] = np.array(mask, dtype=np.int32)"
expect_error "mask_values.h5: answer_mask[2] = 2 (must be 0 or 1)" eval --checkpoint ck/step_00000001.h5 --batch-file mask_values.h5
expect_error "mask_shape.h5: answer_mask must be 1-D with one entry per token (10)" eval --checkpoint ck/step_00000001.h5 --batch-file mask_shape.h5
# the synthetic stream's batch carries its answer mask, and eval reports recall on it
"$LCT" make-batch --data.seq_len 64 --data.doc_lengths fixed --data.max_doc_len 64 --data.min_doc_len 64 \
  --sequences 2 --out answers.h5 > /dev/null || { echo "FAIL: make-batch"; failures=$((failures + 1)); }
out=$("$LCT" eval --checkpoint ck/step_00000001.h5 --batch-file answers.h5)
# 64-token documents hold 2 key-value pairs, so 2 queries each
if [[ "$out" == *" of 4 answers)"* ]]; then echo "ok: eval recall on 4 answers"; else echo "FAIL: eval recall: $out"; failures=$((failures + 1)); fi
if [[ "$out" == *"| answered "*" of 2 documents)"* ]]; then echo "ok: eval answered on 2 documents"; else echo "FAIL: eval answered: $out"; failures=$((failures + 1)); fi
# pass-key documents, the answer-only loss and RoPE scaling refuse what they cannot do
expect_error "data.source = passkey needs data.max_doc_len >= 179" train --data.source passkey --data.doc_lengths fixed --data.max_doc_len 100
expect_error "data.source = passkey needs data.min_doc_len >= 179" train --data.source passkey --data.doc_lengths uniform --data.max_doc_len 500 --data.min_doc_len 10
expect_error "data.passkey_depth must be -1 (uniform) or in [0, 1], got 1.5" train --data.source passkey --data.min_doc_len 200 --data.passkey_depth 1.5
expect_error "train.loss_on = answers needs a source that marks answers" train --data.source text --data.path ok.txt --train.loss_on answers
expect_error "model.rope_scaling: unknown RoPE scaling 'ntk'" train --model.rope_scaling ntk
expect_error "model.rope_scaling = yarn needs model.rope_original_length > 0" train --model.rope_scaling yarn --model.rope_scaling_factor 4
expect_error "model.rope_scaling_factor must be in [1, 1e6]" train --model.rope_scaling linear --model.rope_scaling_factor 0.5
expect_error "model.rope_scaling = dynamic rebuilds RoPE for each batch's longest document" \
  train --model.rope_scaling dynamic --model.rope_original_length 64 --parallel.cp 2
expect_error "model.rope_scaling = yarn needs model.rope_original_length > 0" \
  eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --model.rope_scaling yarn
expect_error "attention.kernel: unknown attention kernel 'flash'" eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --attention.kernel flash
expect_error "attention.dca_chunk_size (64) must be > attention.dca_local_size (64)" \
  eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --attention.kernel dca \
  --attention.dca_chunk_size 64 --attention.dca_local_size 64
expect_error "attention.dca_chunk_size (8) must be > attention.dca_local_size (9)" \
  train --attention.kernel dca --attention.dca_chunk_size 8 --attention.dca_local_size 9
expect_error "parallel.dp x parallel.pp x parallel.cp = 2 x 1 x 1 = 2 but the MPI world has 1 rank (launch with mpirun -np 2" \
  train --parallel.dp 2
expect_error "--out is required" make-batch --sequences 2
expect_error "--sections: nonsense not in" bench --sections nonsense
# issue 14, findings 6-8 and 10: integers range-checked before narrowing, exact dtypes,
# a stream without targets, CLI11's range errors in lct's one-line form (exit 1)
expect_error "model.num_hidden_layers must be <= 2147483647, got 4294967297" \
  train --model.num_hidden_layers 4294967297 --checkpoint.dir narrowed
[[ -e narrowed ]] && { echo "FAIL: a refused run created its folder"; failures=$((failures + 1)); }
expect_error "--first 9223372036854775807 + --sequences 1 is beyond the stream's addressable range" \
  make-batch --first 9223372036854775807 --out overflow.h5
expect_error "exceeds a batch file's int32 offsets" make-batch --sequences 1048576 --out big.h5
[[ -e overflow.h5 || -e big.h5 ]] && { echo "FAIL: a refused make-batch wrote its file"; failures=$((failures + 1)); }
/usr/bin/python3 -c "
import h5py, numpy as np
with h5py.File('float_tokens.h5', 'w') as f:
    f['tokens'] = np.arange(10, dtype=np.float32)
    f['cu_seqlens'] = np.array([0, 10], dtype=np.int32)
with h5py.File('float_cu.h5', 'w') as f:
    f['tokens'] = np.arange(10, dtype=np.int32)
    f['cu_seqlens'] = np.array([0, 7.9, 10], dtype=np.float64)
with h5py.File('int64_tokens.h5', 'w') as f:
    f['tokens'] = np.arange(10, dtype=np.int64)
    f['cu_seqlens'] = np.array([0, 10], dtype=np.int32)"
expect_error "float_tokens.h5: tokens must be int32, not float32" eval --checkpoint ck/step_00000001.h5 --batch-file float_tokens.h5
expect_error "float_cu.h5: cu_seqlens must be int32, not float64" eval --checkpoint ck/step_00000001.h5 --batch-file float_cu.h5
expect_error "int64_tokens.h5: tokens must be int32, not int64" eval --checkpoint ck/step_00000001.h5 --batch-file int64_tokens.h5
printf 'a\n\nb\n\nc\n\n' > single_tokens.txt
expect_error "is a single token, so there is no target to train on" \
  train --data.source text --data.path single_tokens.txt --data.separator $'\n\n' --checkpoint.dir no_targets
[[ -e no_targets ]] && { echo "FAIL: a refused run created its folder"; failures=$((failures + 1)); }
expect_error "--sequences: must be > 0, got 0 (see --help)" make-batch --sequences 0 --out zero.h5
expect_error "--threads: must be >= 0, got -1 (see --help)" eval --threads -1 --checkpoint a.h5 --batch-file b.h5
expect_error "--bandwidth: must be > 0, got -1 (see --help)" simulate --bandwidth -1
expect_error "The following argument was not expected: --bogus" train --bogus
# values are checked in the type they are used in (float32), and the optimizer's
# arithmetic with them (issue 22, causes 3-5)
expect_error "train.lr = 1e39 does not fit float32" train --train.lr 1e39
expect_error "train.weight_decay = 1e39 does not fit float32" train --train.weight_decay 1e39
expect_error "train.eps = 1e-50 is below float32's smallest normal number" train --train.eps 1e-50
expect_error "train.beta2 must be in [0, 1) as a float32" train --train.beta2 0.99999999999
expect_error "model.init_std = 1e39 does not fit float32" train --model.init_std 1e39
expect_error "attention.dca_mscale = 1e39 does not fit float32" train --attention.dca_mscale 1e39
expect_error "train.lr x train.weight_decay = 2.0 must be < 1" train --train.lr 2 --train.weight_decay 1
# a run's own files are no place for its timeline (cause 8)
expect_error "trace.path 'ck/step_00000001.h5' is a file the run writes in checkpoint.dir 'ck'" \
  train --checkpoint.dir ck --train.resume auto --trace.path ck/step_00000001.h5
expect_error "trace.path './ck/metrics.jsonl' is a file the run writes" \
  train --checkpoint.dir ck --trace.path ./ck/metrics.jsonl
mkdir -p cfgdir && printf '[checkpoint]\ndir = "cfgdir"\n' > cfgdir/run.toml
expect_error "--config 'cfgdir/run.toml' is a file the run writes in checkpoint.dir 'cfgdir'" \
  train --config cfgdir/run.toml
# lengths and degrees are range-checked before they are narrowed or multiplied (14, 15)
expect_error "--attention-lengths: Value 4294967297 not in range" bench --attention-lengths 4294967297
expect_error "parallel.dp x parallel.pp x parallel.cp overflows (parallel.dp = 7905747460161236407, parallel.pp = 7" \
  train --parallel.dp 7905747460161236407 --parallel.pp 7

# inputs must be regular files: a FIFO would block forever, /dev/zero never end (cause 6)
mkfifo fifo
expect_error "config file 'fifo': not a regular file (a FIFO)" train --config fifo
expect_error "data.path 'fifo': not a regular file (a FIFO)" train --data.source tokens --data.path fifo
expect_error "data.path '/dev/zero': not a regular file (a character device)" \
  train --data.source tokens --data.path /dev/zero
expect_error "inspect 'fifo': not a regular file (a FIFO)" inspect fifo
expect_error "HDF5 file 'fifo': not a regular file (a FIFO)" \
  eval --checkpoint ck/step_00000001.h5 --batch-file fifo
# outputs never replace what is not a regular file (cause 7): a device, a FIFO, a link
"$LCT" make-batch --data.seq_len 64 --out real_batch.h5 > /dev/null || { echo "FAIL: make-batch"; failures=$((failures + 1)); }
ln -s real_batch.h5 link_batch.h5
expect_error "output '/dev/null' is a character device, not a regular file" make-batch --data.seq_len 64 --out /dev/null
expect_error "output 'fifo' is a FIFO, not a regular file" make-batch --data.seq_len 64 --out fifo
expect_error "output 'link_batch.h5' is a symbolic link, not a regular file" \
  make-batch --data.seq_len 64 --out link_batch.h5
expect_error "output '/dev/null' is a character device" \
  eval --checkpoint ck/step_00000001.h5 --batch-file real_batch.h5 --per-position-out /dev/null
[[ -c /dev/null && -p fifo && -L link_batch.h5 ]] || { echo "FAIL: an output replaced a device, FIFO or link"; failures=$((failures + 1)); }
# a token file truncated while a run reads it: read whole at the start, no SIGBUS (11)
/usr/bin/python3 -c "import struct, sys; sys.stdout.buffer.write(struct.pack('<199H', *range(1, 200)) * 4000)" > shrink.bin
"$LCT" train --model.hidden_size 32 --model.intermediate_size 32 --model.num_hidden_layers 1 \
  --data.source tokens --data.token_dtype uint16 --data.path shrink.bin --data.seq_len 64 \
  --train.steps 400 --checkpoint.every 0 --checkpoint.dir shrink_run > shrink.log 2>&1 &
shrinker=$!  # (the session-start binary died here with SIGBUS, exit 135)
for _ in $(seq 400); do grep -q "step " shrink.log 2>/dev/null && break; sleep 0.02; done
: > shrink.bin
wait $shrinker || { echo "FAIL: a run whose token file was truncated died"; cat shrink.log; failures=$((failures + 1)); }
# lct inspect reads lct eval's gradient files (cause 12)
"$LCT" eval --checkpoint ck/step_00000001.h5 --batch-file real_batch.h5 --grads-out grads.h5 > /dev/null \
  || { echo "FAIL: eval --grads-out"; failures=$((failures + 1)); }
"$LCT" inspect grads.h5 > grads_inspect.txt 2>&1 || { echo "FAIL: inspect of a grads file"; cat grads_inspect.txt; failures=$((failures + 1)); }
grep -q "grad.model.embed_tokens.weight" grads_inspect.txt || { echo "FAIL: inspect shows no gradients"; failures=$((failures + 1)); }
# ... and every other file lct writes: batches and per-position loss files
"$LCT" eval --checkpoint ck/step_00000001.h5 --batch-file real_batch.h5 --per-position-out pos.csv > /dev/null \
  || { echo "FAIL: eval --per-position-out"; failures=$((failures + 1)); }
for f in real_batch.h5 pos.csv; do
  "$LCT" inspect "$f" > "$f.txt" 2>&1 && "$LCT" inspect "$f" --json | /usr/bin/python3 -c "import json, sys; json.load(sys.stdin)" \
    || { echo "FAIL: inspect $f"; cat "$f.txt"; failures=$((failures + 1)); }
done
grep -q "format: batch" real_batch.h5.txt && grep -q "format: per-position loss" pos.csv.txt \
  || { echo "FAIL: inspect of a batch or per-position file"; failures=$((failures + 1)); }

if ls ck/*.tmp >/dev/null 2>&1; then echo "FAIL: temporary file left behind"; failures=$((failures + 1)); fi

if [[ $failures -ne 0 ]]; then echo "cli_errors: $failures failures"; exit 1; fi
echo "cli_errors: all passed"
