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
  if [[ $rc -eq 0 ]]; then
    echo "FAIL (exit 0): lct $*"; failures=$((failures + 1)); return
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
if ls ck/*.tmp >/dev/null 2>&1; then echo "FAIL: temporary file left behind"; failures=$((failures + 1)); fi

if [[ $failures -ne 0 ]]; then echo "cli_errors: $failures failures"; exit 1; fi
echo "cli_errors: all passed"
