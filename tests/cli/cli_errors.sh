#!/usr/bin/env bash
# Bad input gets a clear one-line error naming the key, file or value, and a non-zero
# exit. Each case: expected substring, then the lct arguments.
set -uo pipefail
LCT=$1
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
failures=0

expect_error() {
  local want=$1
  shift
  local err
  err=$(timeout 120 "$LCT" "$@" 2>&1 >/dev/null)  # a hang is a failure (exit 124), not a stuck suite
  local rc=$?
  if [[ $rc -ne 1 ]]; then  # the documented exit code of every bad input
    echo "FAIL (exit $rc, expected 1): lct $*"; failures=$((failures + 1)); return
  fi
  if [[ "$err" != *"$want"* ]]; then
    echo "FAIL (message): lct $*"; echo "  wanted: $want"; echo "  got:    $err"
    failures=$((failures + 1)); return
  fi
  # (a run that fails after its start-up has already logged the machine's warnings, e.g.
  # OpenBLAS's AVX2 kernels forced by OPENBLAS_CORETYPE on an AVX-512 CPU: not the error)
  if [[ $(printf '%s\n' "$err" | grep -v '^lct: warning: OpenBLAS runs its' | grep -c .) -ne 1 ]]; then
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
# a key starting with a letter outside ASCII (toml++ 3.3.0 reaches a branch it marks
# unreachable for it: CMakeLists.txt, toml_impl.cpp): one line all the same
printf '[model]\n\xc3\xa9 = 1\n' > accented_key.toml
expect_error "saw 'é'" train --config accented_key.toml
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
# the masks that read the token a query predicts: lct eval and lct generate refuse them
# as lct train does (a loss over tokens the model has read), and write nothing
expect_error "attention.mask = full_document lets a query read the token it predicts, so the next-token loss would score tokens it has read (lct bench runs it; lct eval takes" \
  eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --attention.mask full_document --per-document-out ahead.csv
[[ ! -e ahead.csv ]] || { echo "FAIL: a refused lct eval wrote ahead.csv"; failures=$((failures + 1)); }
expect_error "attention.mask = causal_blockwise lets a query read the token it predicts" \
  eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --attention.mask causal_blockwise --attention.block_size 4
expect_error "attention.mask = bidirectional_window lets a query read the token it predicts, so the next-token loss cannot predict under it (lct bench runs it; lct generate takes" \
  generate --checkpoint ck/step_00000001.h5 --prompt abc --attention.mask bidirectional_window --attention.window 4
# per-document mask data (prefix_lm, shared_question) of the wrong shape or values
/usr/bin/python3 -c "
import h5py, numpy as np
for name, ds, data in (('prefix_long.h5', 'prefix_lens', [3, 9]), ('prefix_count.h5', 'prefix_lens', [1]),
                       ('prefix_all.h5', 'prefix_lens', [4, 6]),
                       ('prefix_float.h5', 'prefix_lens', np.array([1.0, 2.0])),
                       ('segments_order.h5', 'segment_ids', [0, 0, 2, 1, 1, 0, 1, 1, 1, 1]),
                       ('segments_count.h5', 'segment_ids', [0, 1, 1])):
    with h5py.File(name, 'w') as f:
        f['tokens'] = np.arange(10, dtype=np.int32)
        f['cu_seqlens'] = np.array([0, 4, 10], dtype=np.int32)
        f[ds] = np.asarray(data, dtype=np.float64 if name == 'prefix_float.h5' else np.int32)"
expect_error "prefix_long.h5: prefix_lens[1] = 9 is outside its document of 6 tokens" eval --checkpoint ck/step_00000001.h5 --batch-file prefix_long.h5
# every integer option is read whole (issue 54 cause 5: CLI11 took ' 5', '+5' and hex)
expect_error "--threads: must be an integer, got ' 5'" eval --checkpoint ck/step_00000001.h5 --batch-file prefix_all.h5 --threads " 5"
expect_error "--threads: must be an integer, got '0x5'" eval --checkpoint ck/step_00000001.h5 --batch-file prefix_all.h5 --threads 0x5
expect_error "--sequences: must be an integer, got '+2'" make-batch --out never.h5 --sequences +2
expect_error "--first: must be <= 9223372036854775807, got 9223372036854775808" make-batch --out never.h5 --first 9223372036854775808
expect_error "--ranks: must be an integer, got '2.0'" simulate --ranks 2.0
# messages name the real cause (issue 54 cause 8): every target inside a prefix is not
# "every document has a single token"; a FIFO or folder named config.json is not "no
# config.json in the folder"
expect_error "prefix_all.h5: no targets (attention.mask = prefix_lm trains none of them: every target lies inside a prefix" \
  eval --checkpoint ck/step_00000001.h5 --batch-file prefix_all.h5 --attention.mask prefix_lm
mkdir -p fifo_model dir_model/config.json && mkfifo fifo_model/config.json
expect_error "fifo_model/config.json: not a regular file (a FIFO)" eval --checkpoint fifo_model --batch-file prefix_all.h5
expect_error "dir_model/config.json: not a regular file (a folder)" eval --checkpoint dir_model --batch-file prefix_all.h5
expect_error "prefix_count.h5: prefix_lens has 1 entries for 2 documents" eval --checkpoint ck/step_00000001.h5 --batch-file prefix_count.h5
expect_error "prefix_float.h5: prefix_lens must be int32" eval --checkpoint ck/step_00000001.h5 --batch-file prefix_float.h5
expect_error "segments_order.h5: segment_ids[3] = 1 after 2" eval --checkpoint ck/step_00000001.h5 --batch-file segments_order.h5
expect_error "segments_count.h5: segment_ids has 3 entries for 10 tokens" eval --checkpoint ck/step_00000001.h5 --batch-file segments_count.h5
# the synthetic stream's batch carries its answer mask, and eval reports recall on it
"$LCT" make-batch --data.seq_len 64 --data.doc_lengths fixed --data.max_doc_len 64 --data.min_doc_len 64 \
  --sequences 2 --out answers.h5 > /dev/null || { echo "FAIL: make-batch"; failures=$((failures + 1)); }
out=$("$LCT" eval --checkpoint ck/step_00000001.h5 --batch-file answers.h5)
# 64-token documents hold 2 key-value pairs, so 2 queries each
if [[ "$out" == *" of 4 answers)"* ]]; then echo "ok: eval recall on 4 answers"; else echo "FAIL: eval recall: $out"; failures=$((failures + 1)); fi
if [[ "$out" == *"| answered "*" of 2 documents)"* ]]; then echo "ok: eval answered on 2 documents"; else echo "FAIL: eval answered: $out"; failures=$((failures + 1)); fi
# --per-document-out: a row per document whose answers add up to the summary line's
out=$("$LCT" eval --checkpoint ck/step_00000001.h5 --batch-file answers.h5 --per-document-out docs.csv)
if /usr/bin/python3 - "$out" docs.csv <<'PY'
import csv, re, sys
line, rows = sys.argv[1], list(csv.DictReader(open(sys.argv[2])))
recall = re.search(r"recall \S+ \((\d+) of (\d+) answers\)", line)
answered = re.search(r"answered \S+ \((\d+) of (\d+) documents\)", line)
targets = int(re.search(r"targets (\d+)", line).group(1))
loss = float(re.search(r"loss (\S+)", line).group(1))
assert len(rows) == 2 and [int(r["document"]) for r in rows] == [0, 1], rows
assert [int(r["first_token"]) for r in rows] == [0, 64] and all(int(r["tokens"]) == 64 for r in rows), rows
assert sum(int(r["targets"]) for r in rows) == targets == 126, rows
assert sum(int(r["answers_correct"]) for r in rows) == int(recall.group(1)), (rows, line)
assert sum(int(r["answers"]) for r in rows) == int(recall.group(2)) == 4, (rows, line)
assert sum(int(r["answered"]) for r in rows) == int(answered.group(1)), (rows, line)
for r in rows:  # answered: every answer of the document right
    assert int(r["answered"]) == (r["answers"] == r["answers_correct"]), r
mean = sum(float(r["mean_loss"]) * int(r["targets"]) for r in rows) / targets
assert abs(mean - loss) <= 1e-6 * loss, (mean, loss)  # 8 significant digits written
PY
then echo "ok: eval --per-document-out adds up to the summary"; else echo "FAIL: eval --per-document-out"; failures=$((failures + 1)); fi
"$LCT" inspect docs.csv --json | /usr/bin/python3 -c "
import json, sys; j = json.load(sys.stdin)
assert j['format'] == 'per_document' and j['documents'] == 2 and j['answers'] == 4, j" \
  && echo "ok: inspect reads a per-document file" || { echo "FAIL: inspect of a per-document file"; failures=$((failures + 1)); }
printf 'document,first_token,tokens,targets,mean_loss,answers,answers_correct,answered\n0,0,64,63,1.5,2,2,0\n' > docs_bad.csv
expect_error "docs_bad.csv: not a per-document row: '0,0,64,63,1.5,2,2,0'" inspect docs_bad.csv
# pass-key documents, the answer-only loss and RoPE scaling refuse what they cannot do
expect_error "data.source = passkey needs data.max_doc_len >= 179" train --data.source passkey --data.doc_lengths fixed --data.max_doc_len 100
expect_error "data.source = passkey needs data.min_doc_len >= 179" train --data.source passkey --data.doc_lengths uniform --data.max_doc_len 500 --data.min_doc_len 10
expect_error "data.passkey_depth must be -1 (uniform) or in [0, 1], got 1.5" train --data.source passkey --data.min_doc_len 200 --data.passkey_depth 1.5
expect_error "train.loss_on = answers needs a source that marks answers" train --data.source text --data.path ok.txt --train.loss_on answers
expect_error "model.rope_scaling: unknown RoPE scaling 'ntk'" train --model.rope_scaling ntk
expect_error "model.rope_scaling = yarn needs model.rope_original_length > 0" train --model.rope_scaling yarn --model.rope_scaling_factor 4
expect_error "model.rope_scaling_factor must be in [1, 1e6]" train --model.rope_scaling linear --model.rope_scaling_factor 0.5
expect_error "model.rope_scaling = dynamic rebuilds RoPE for each batch's longest document" \
  train --model.rope_scaling dynamic --model.rope_original_length 64 --attention.placement cad
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
expect_error "--threads: Value -1 not in range 0 to 1024 (see --help)" eval --threads -1 --checkpoint a.h5 --batch-file b.h5
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
expect_error "trace.path 'ck/step_00000001.h5' is a file the run keeps in checkpoint.dir 'ck'" \
  train --checkpoint.dir ck --train.resume auto --trace.path ck/step_00000001.h5
expect_error "trace.path './ck/metrics.jsonl' is a file the run keeps" \
  train --checkpoint.dir ck --trace.path ./ck/metrics.jsonl
mkdir -p cfgdir && printf '[checkpoint]\ndir = "cfgdir"\n' > cfgdir/run.toml
expect_error "--config 'cfgdir/run.toml' is a file the run keeps in checkpoint.dir 'cfgdir'" \
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
expect_error "--out '/dev/null' is a character device, not a regular file" make-batch --data.seq_len 64 --out /dev/null
expect_error "--out 'fifo' is a FIFO, not a regular file" make-batch --data.seq_len 64 --out fifo
expect_error "--out 'link_batch.h5' is a symbolic link, not a regular file" \
  make-batch --data.seq_len 64 --out link_batch.h5
expect_error "--per-position-out '/dev/null' is a character device" \
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

# ---- reliability round 3 (issue 37) ----
# crafted.edit(name, change): a copy of ck's checkpoint changed through h5py, without
# lct's seal (the file was changed on purpose)
cat > crafted.py <<'PY'
import h5py, shutil
def edit(name, change):
    shutil.copy("ck/step_00000001.h5", name)
    with h5py.File(name, "r+") as f:
        change(f)
    with open(name, "r+b") as f:
        f.write(b" " * 20)
PY
TINY_MODEL=(--model.hidden_size 32 --model.intermediate_size 32 --model.num_hidden_layers 1
            --model.num_attention_heads 2 --model.num_key_value_heads 1 --data.seq_len 64)
TINY=("${TINY_MODEL[@]}" --train.steps 1)
# cause 2: run-folder files are regular files lct owns: a symlinked lock, run.toml or
# metrics.jsonl is never written through, a FIFO never waited on
mkdir -p lnk && echo "precious" > precious.txt && ln -s ../precious.txt lnk/run.lock
expect_error "checkpoint.dir: cannot open the lock file 'lnk/run.lock': it is a symbolic link" \
  train "${TINY[@]}" --checkpoint.dir lnk
mkdir -p lockfifo && mkfifo lockfifo/run.lock
expect_error "checkpoint.dir: the lock file 'lockfifo/run.lock' is not a regular file" \
  train "${TINY[@]}" --checkpoint.dir lockfifo
for d in lnk2 fifo2; do  # a run's folder whose metrics.jsonl became a symlink or a FIFO
  "$LCT" train "${TINY[@]}" --checkpoint.dir $d > /dev/null || { echo "FAIL: tiny train $d"; failures=$((failures + 1)); }
  rm $d/metrics.jsonl
done
ln -s ../precious.txt lnk2/metrics.jsonl && mkfifo fifo2/metrics.jsonl
expect_error "lnk2/metrics.jsonl' is a symbolic link" train "${TINY_MODEL[@]}" --train.steps 2 --checkpoint.dir lnk2 --train.resume auto
mkdir -p lnk3 && ln -s ../precious.txt lnk3/run.toml
expect_error "lnk3/run.toml' is a symbolic link" train "${TINY[@]}" --checkpoint.dir lnk3 --checkpoint.overwrite true
expect_error "fifo2/metrics.jsonl' is a FIFO" train "${TINY_MODEL[@]}" --train.steps 2 --checkpoint.dir fifo2 --train.resume auto
[[ $(cat precious.txt) == precious ]] || { echo "FAIL: a run wrote through a symlink in its folder"; failures=$((failures + 1)); }
# cause 12: the trace may not be the run's lock (it was written over it at the end)
expect_error "trace.path 'tl/run.lock' is a file the run keeps in checkpoint.dir 'tl'" \
  train "${TINY[@]}" --checkpoint.dir tl --trace.path tl/run.lock
# cause 5: TOML nested thousands deep (config files, a checkpoint's /config, run.toml)
/usr/bin/python3 -c "print('[train]\nsteps = ' + '[' * 100000 + ']' * 100000)" > deep.toml
expect_error "config file 'deep.toml':2: arrays or tables nested more than 32 deep" train --config deep.toml
/usr/bin/python3 -c "print('[train]\n' + '.'.join(['a'] * 100000) + ' = 1')" > dotted.toml
expect_error "config file 'dotted.toml':2: a dotted key of more than 32 parts" train --config dotted.toml
/usr/bin/python3 -c "print('x = ' + '{a = ' * 100000 + '1' + '}' * 100000)" > inline.toml
expect_error "config file 'inline.toml':1: arrays or tables nested more than 32 deep" train --config inline.toml
/usr/bin/python3 - <<'PY'
from crafted import edit
def deep_config(f):
    del f["config"]
    f["config"] = "[train]\nsteps = " + "[" * 100000 + "]" * 100000
edit("deepcfg.h5", deep_config)
PY
expect_error "deepcfg.h5:/config':2: arrays or tables nested more than 32 deep" inspect deepcfg.h5
# causes 3 and 4: HDF5 links and array-valued attributes and strings in crafted files
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
from crafted import edit
def external(f):
    del f["model"]
    f["model"] = h5py.ExternalLink("/dev/zero", "/model")
def soft(f):
    f.move("model", "model_moved")
    f["model"] = h5py.SoftLink("/model_moved")
def int_array(f):
    f["model"].attrs["hidden_size"] = np.arange(1000, dtype=np.int64)
def float_array(f):
    f["model"].attrs["rms_norm_eps"] = np.ones(1000)
def string_array(f):
    f["model"].attrs["attention_kernel"] = np.array([b"causal"] * 1000, dtype="S6")
def vlen_array(f):
    f["model"].attrs.create("attention_kernel", ["causal"] * 1000, dtype=h5py.string_dtype())
def config_array(f):
    del f["config"]
    f.create_dataset("config", data=["[train]"] * 1000, dtype=h5py.string_dtype())
for name, change in [("external", external), ("soft", soft), ("int_array", int_array),
                     ("float_array", float_array), ("string_array", string_array),
                     ("vlen_array", vlen_array), ("config_array", config_array)]:
    edit(name + ".h5", change)
with h5py.File("batch_external.h5", "w") as f:
    f["tokens"] = h5py.ExternalLink("/dev/zero", "/tokens")
    f["cu_seqlens"] = np.array([0, 10], dtype=np.int32)
PY
expect_error "external.h5: /model is an external link: lct reads only objects stored in the file itself" inspect external.h5
expect_error "soft.h5: /model is a soft link" inspect soft.h5
expect_error "int_array.h5: attribute /model@hidden_size holds 1000 values, not one" inspect int_array.h5
expect_error "float_array.h5: attribute /model@rms_norm_eps holds 1000 values, not one" inspect float_array.h5
expect_error "string_array.h5: attribute /model@attention_kernel holds 1000 values, not one" inspect string_array.h5
expect_error "vlen_array.h5: attribute /model@attention_kernel holds 1000 values, not one" inspect vlen_array.h5
expect_error "config_array.h5: /config holds 1000 strings, not one" inspect config_array.h5
expect_error "batch_external.h5: /tokens is an external link" eval --checkpoint ck/step_00000001.h5 --batch-file batch_external.h5
expect_error "external.h5: /model is an external link" train "${TINY[@]}" --train.resume external.h5 --checkpoint.dir ext_ck

# cause 6: a sequence index is reached by walking document lengths: bounded, never days
expect_error "lies more than 268435456 documents into the data stream" \
  make-batch --data.seq_len 1048576 --data.min_doc_len 2 --data.max_doc_len 2 --first 100000 --out far.h5
# ... and a SIGTERM during a resumed run's long seek ends it at once (the checkpoint it
# resumed from is untouched)
/usr/bin/python3 - <<'PY'
import numpy as np
from crafted import edit
def far(f):
    f["trainer"].attrs["next_sequence"] = np.int64(10**12)
    f["trainer"].attrs["tokens_seen"] = np.int64(10**12)
edit("far_ck.h5", far)
PY
sum_before=$(md5sum < far_ck.h5)
"$LCT" train "${TINY_MODEL[@]}" --train.steps 2 --train.resume far_ck.h5 --checkpoint.dir far > far.log 2>&1 &
far=$!
for _ in $(seq 600); do grep -q "resumed at step 1" far.log && break; sleep 0.1; done  # the seek follows
sleep 0.5
kill -TERM $far
start=$(date +%s)
wait $far && rc=0 || rc=$?
(( $(date +%s) - start <= 5 )) && [[ $rc -eq 1 ]] && grep -q "lct: error: stopped while seeking the data stream to sequence" far.log \
  && [[ $(md5sum < far_ck.h5) == "$sum_before" ]] \
  || { echo "FAIL: SIGTERM during a seek: exit $rc after $(( $(date +%s) - start )) s"; cat far.log; failures=$((failures + 1)); }
# cause 7: integers are range-checked where they are narrowed
expect_error "train.threads = 4294967297 is more than lct runs (at most 1024" train --train.threads 4294967297
expect_error "--threads: Value 4294967297 not in range 0 to 1024" eval --threads 4294967297 --checkpoint a.h5 --batch-file b.h5
expect_error "attention.dca_mscale_original_length must be in [0, 2^30]" \
  train --attention.kernel dca --attention.dca_mscale_original_length 4294967297
# attention.logit_scaling: a length it can divide by, the causal mask only, a known name
expect_error "attention.logit_scaling = logn needs attention.logit_scaling_length in [2, 2^30] (got 0)" \
  train --attention.logit_scaling logn --dry-run
expect_error "attention.logit_scaling = logn_beyond needs attention.logit_scaling_length in [2, 2^30] (got 1)" \
  train --attention.logit_scaling logn_beyond --attention.logit_scaling_length 1 --dry-run
expect_error "attention.logit_scaling = logn takes only attention.mask = causal (got sliding_window)" \
  train --attention.logit_scaling logn --attention.logit_scaling_length 512 --attention.mask sliding_window --dry-run
expect_error "attention.logit_scaling" train --attention.logit_scaling log --dry-run
# cause 8: a run with nothing to learn is refused, not "trained" with loss 0
expect_error "data.max_doc_len = 1: documents of one token have no next token to predict" \
  train --data.min_doc_len 1 --data.max_doc_len 1
expect_error "no step of this run had a target to learn from (train.loss_on = answers and no sequence holds an answer)" \
  train "${TINY[@]}" --train.loss_on answers --data.min_doc_len 2 --data.max_doc_len 4 --checkpoint.dir notargets
[[ ! -e notargets/step_00000001.h5 ]] || { echo "FAIL: a run without targets wrote a checkpoint"; failures=$((failures + 1)); }
# cause 9: a checkpoint's values are checked as if typed
/usr/bin/python3 - <<'PY'
import numpy as np
from crafted import edit
edit("opt_steps.h5", lambda f: f["optim"].attrs.__setitem__("step_count", np.int64(-5)))
edit("eps_huge.h5", lambda f: f["model"].attrs.__setitem__("rms_norm_eps", 1e39))
edit("layers_wrap.h5", lambda f: f["model"].attrs.__setitem__("num_hidden_layers", np.int64(2**32 + 1)))
edit("run_id.h5", lambda f: f["trainer"].attrs.__setitem__("run_id", 'x"\nseed = 1'))
edit("seen.h5", lambda f: f["trainer"].attrs.__setitem__("next_sequence", np.int64(10**15)))
PY
expect_error "opt_steps.h5: /optim@step_count -5 is outside [0, /trainer@step = 1]" inspect opt_steps.h5
expect_error "eps_huge.h5: /model@rms_norm_eps: model.rms_norm_eps = 9.9999999999999994e+38 does not fit float32" inspect eps_huge.h5
expect_error "layers_wrap.h5: /model@num_hidden_layers: model.num_hidden_layers must be <= 2147483647" inspect layers_wrap.h5
expect_error "run_id.h5: /trainer@run_id is not a run id lct writes" train "${TINY[@]}" --train.resume run_id.h5 --checkpoint.dir rid
expect_error "seen.h5: /trainer@next_sequence 1000000000000000 and @tokens_seen" inspect seen.h5
expect_error "step 1: loss or gradient is not finite" train "${TINY[@]}" --model.init_std 1e30 --checkpoint.dir huge_init
expect_error "model.init_std = 1e+30 is likely too large" train "${TINY[@]}" --model.init_std 1e30 --checkpoint.dir huge_init2
# cause 10: simulate takes only finite, normal sizes
expect_error "--bandwidth: must be 0 or a finite number of magnitude 1e-30 to 1e30, got inf" simulate --bandwidth inf
expect_error "--latency: must be 0 or a finite number of magnitude 1e-30 to 1e30, got 1e-310" simulate --latency 1e-310
expect_error "--tflops: must be 0 or a finite number of magnitude 1e-30 to 1e30, got nan" simulate --tflops nan
expect_error "--attention-scale: must be 0 or a finite number of magnitude 1e-30 to 1e30, got 1e300" simulate --attention-scale 1e300
# cause 16: results that cannot reach stdout are a failure
for cmd in "inspect ck/step_00000001.h5" "inspect ck/step_00000001.h5 --json"; do
  $LCT $cmd > /dev/full 2> full.err && rc=0 || rc=$?
  [[ $rc -eq 1 ]] && grep -q "lct: error: cannot write the results to standard output: No space left on device" full.err \
    || { echo "FAIL: lct $cmd > /dev/full: exit $rc, $(cat full.err)"; failures=$((failures + 1)); }
done
# cause 17: every output is checked before the work
start=$(date +%s)
expect_error "--profile-out '/dev/full' is a character device, not a regular file" \
  bench --sections profile --profile-out /dev/full
(( $(date +%s) - start < 10 )) || { echo "FAIL: bench --profile-out was refused only after its work"; failures=$((failures + 1)); }
expect_error "trace.path '.' is a folder, not a regular file" train "${TINY[@]}" --trace.path . --checkpoint.dir tr
expect_error "--calibration-out 'ck' is a folder, not a regular file" simulate --calibration-out ck

# cause 13: every command checks its memory before it allocates (as train does); under
# a 4 GiB address-space limit so the sizes are impossible on any machine (sanitizer
# builds reserve far more address space: skipped there)
if [[ -z ${LCT_SANITIZED:-} ]]; then
  "$LCT" train --data.seq_len 64 --train.steps 1 --checkpoint.dir defck > /dev/null || { echo "FAIL: default train"; failures=$((failures + 1)); }
  "$LCT" make-batch --data.seq_len 1048576 --data.max_doc_len 16384 --out b1m.h5 > /dev/null || { echo "FAIL: 1M batch"; failures=$((failures + 1)); }
  printf '#!/usr/bin/env bash\nulimit -v 4194304\nexec "%s" "$@"\n' "$LCT" > lct_4g && chmod +x lct_4g
  LCT_UNLIMITED=$LCT LCT=$PWD/lct_4g
  expect_error "not enough memory: lct eval of 1048576 tokens needs about" eval --checkpoint defck/step_00000001.h5 --batch-file b1m.h5
  expect_error "not enough memory: lct make-batch of 200 x 1048576 tokens needs about" make-batch --data.seq_len 1048576 --sequences 200 --out big.h5
  expect_error "not enough memory: lct bench --attention-lengths 16777216 needs about" bench --sections attention --attention-lengths 16777216
  expect_error "lct bench --sections step: not enough memory: a rank needs about" bench --sections step --data.seq_len 4194304 --data.max_doc_len 16384
  LCT=$LCT_UNLIMITED
fi

# ---- reliability round 5 (issue 87) ----
# cause 1: one output rule for every command: no output may replace an input, whatever
# the command (bench --profile-out replaced its --config, ceilings, corpus and profile)
printf '[train]\nsteps = 1\n' > own.toml
echo '{}' > ceil.json
printf 'q_grid = [1]\n' > prof.toml
cp own.toml own.bak
expect_error "--profile-out 'own.toml' is the same file as --config 'own.toml'" \
  bench --sections profile --config own.toml --profile-out own.toml
expect_error "--profile-out 'ceil.json' is the same file as --ceilings-from 'ceil.json'" \
  bench --sections profile --ceilings-from ceil.json --profile-out ceil.json
expect_error "--profile-out 'ok.txt' is the same file as data.path 'ok.txt'" \
  bench --sections profile --data.source text --data.path ok.txt --profile-out ok.txt
expect_error "--out 'ok.txt' is the same file as data.path 'ok.txt'" \
  make-batch --data.source text --data.path ok.txt --out ok.txt
expect_error "--calibration-out 'ok.txt' is the same file as data.path 'ok.txt'" \
  simulate --ranks 1 --data.source text --data.path ok.txt --calibration-out ok.txt
cmp -s own.toml own.bak && [[ $(cat ceil.json) == '{}' && $(cat ok.txt) == "some text" ]] \
  || { echo "FAIL: a refused command changed its input"; failures=$((failures + 1)); }
# cause 14: an empty value is refused, never read as "not given"
expect_error "--continuation-tokens: empty value" generate --checkpoint ck/step_00000001.h5 --prompt abc --continuation-tokens ""
expect_error "--grads-out: empty value" eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --grads-out ""
expect_error "--calibration-out: empty value" simulate --ranks 1 --calibration-out ""
expect_error "--out: empty value" make-batch --out ""
# causes 2-3 and 15: a model with a NaN weight is refused by every command that reads
# one, naming the tensor; a checkpoint of a later format version too
"$LCT" export --checkpoint ck/step_00000001.h5 --out hf_nan > /dev/null || { echo "FAIL: export"; failures=$((failures + 1)); }
/usr/bin/python3 - <<'PY'
import json, struct
path = "hf_nan/model.safetensors"
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
begin = json.loads(data[8:8 + n])["model.layers.0.self_attn.q_proj.weight"]["data_offsets"][0]
data[8 + n + begin + 12:8 + n + begin + 16] = struct.pack("<f", float("nan"))  # element 3
open(path, "wb").write(data)
PY
nan_msg="tensor model.layers.0.self_attn.q_proj.weight holds a non-finite value (nan at element 3)"
expect_error "$nan_msg" eval --checkpoint hf_nan --batch-file ok.h5 --grads-out nan_grads.h5
[[ ! -e nan_grads.h5 ]] || { echo "FAIL: eval of a NaN model wrote its gradients"; failures=$((failures + 1)); }
expect_error "$nan_msg" generate --checkpoint hf_nan --prompt abc
expect_error "$nan_msg" export --checkpoint hf_nan --out hf_nan2
expect_error "$nan_msg" train "${TINY[@]}" --train.init_from hf_nan --checkpoint.dir nan_init
/usr/bin/python3 - <<'PY'
import numpy as np
from crafted import edit
edit("future.h5", lambda f: f.attrs.__setitem__("format_version", np.int64(2)))
PY
for cmd in "eval --checkpoint future.h5 --batch-file ok.h5" "generate --checkpoint future.h5 --prompt abc" \
           "export --checkpoint future.h5 --out future_hf" "inspect future.h5"; do
  # shellcheck disable=SC2086  # the command's words
  expect_error "future.h5: checkpoint format_version 2 is not supported (this lct reads 1)" $cmd
done
# cause 12: settings files have a size limit (a sparse 3 GiB file: nothing is read)
truncate -s 3G huge.toml
expect_error "config file 'huge.toml': 3221225472 bytes, more than a settings file can be (64 MiB)" train --config huge.toml
rm -f huge.toml
# cause 13: an override that does nothing is said by eval and generate, as by train
warn=$("$LCT" eval --checkpoint ck/step_00000001.h5 --batch-file ok.h5 --attention.window 8 --attention.dca_mscale 1.5 2>&1 >/dev/null)
[[ $warn == *"attention.window = 8 does nothing under attention.mask = causal"* &&
   $warn == *"attention.dca_mscale = 1.5 does nothing under attention.kernel = causal"* ]] \
  || { echo "FAIL: eval's inert overrides: '$warn'"; failures=$((failures + 1)); }
warn=$("$LCT" generate --checkpoint ck/step_00000001.h5 --prompt abc --max-new-tokens 1 --model.rope_scaling_factor 2 2>&1 >/dev/null)
[[ $warn == *"model.rope_scaling_factor = 2"*"does nothing under model.rope_scaling = none"* ]] \
  || { echo "FAIL: generate's inert override: '$warn'"; failures=$((failures + 1)); }
# the one number parser: no hex, no '+' (CLI11 read --heartbeat-s 0x10 as 16)
expect_error "--heartbeat-s: must be a decimal number, got '0x10'" generate --checkpoint ck/step_00000001.h5 --prompt abc --heartbeat-s 0x10
expect_error "train.lr must be a number, got '0x1p-8'" train --train.lr 0x1p-8
# cause 16: inspect --compare prints no nan for figures both runs lack
"$LCT" inspect --compare ck/step_00000001.h5 ck/step_00000001.h5 > cmp.txt 2>&1 \
  || { echo "FAIL: inspect --compare"; cat cmp.txt; failures=$((failures + 1)); }
if grep -qi "nan" cmp.txt; then echo "FAIL: inspect --compare printed nan"; grep -i nan cmp.txt; failures=$((failures + 1)); fi
# the NUL byte of a tensor name: printed escaped, the message whole
"$LCT" export --checkpoint ck/step_00000001.h5 --out hf_nul > /dev/null || { echo "FAIL: export"; failures=$((failures + 1)); }
/usr/bin/python3 - <<'PY'
import json, struct
path = "hf_nul/model.safetensors"
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
header["z\u0000x"] = header.pop("model.norm.weight")
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
expect_error "tensor 'z\x00x': not a tensor of lct's Llama with this config.json" generate --checkpoint hf_nul --prompt abc

if ls ck/*.lct-* >/dev/null 2>&1; then echo "FAIL: temporary file left behind"; failures=$((failures + 1)); fi

if [[ $failures -ne 0 ]]; then echo "cli_errors: $failures failures"; exit 1; fi
echo "cli_errors: all passed"
