#!/usr/bin/env bash
# Hugging Face interop (issue 41): lct export writes a folder that an independent NumPy
# reader and float64 Llama forward (scripts/hf_reference.py) evaluates to lct's loss
# within 1e-5 (untied, tied, linear and yarn RoPE scaling); train.init_from starts a run
# from it with bit-identical fp32 parameters (and the bf16 export's within bf16 rounding:
# exactly each value rounded to nearest even); lct eval reads the folder, sharded too;
# conflicting model keys, a missing folder and malformed files are one-line errors.
set -euo pipefail
LCT=$1
SRC=$2
PY=/usr/bin/python3
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
TINY=($(model_keys 32 48 2 4 2) --data.seq_len 128 --train.threads 1)

loss_of() { "$LCT" eval --checkpoint "$1" --batch-file batch.h5 --threads 1 | sed -E 's/^loss ([^ ]+) .*/\1/'; }

# one model per case: train 2 steps, export, evaluate three ways
check_case() {  # name extra-train-args...
  local name=$1
  shift
  "$LCT" train "${TINY[@]}" "$@" --train.steps 2 --checkpoint.dir "ck_$name" > /dev/null
  local ck="ck_$name/step_00000002.h5"
  "$LCT" export --checkpoint "$ck" --out "hf_$name" > "export_$name.txt"
  [[ -f hf_$name/model.safetensors && -f hf_$name/config.json ]] || fail "$name: export wrote no folder"
  local a b c
  a=$(loss_of "$ck")
  b=$(loss_of "hf_$name")
  [[ $a == "$b" ]] || fail "$name: lct eval of the checkpoint ($a) and of its export ($b) differ"
  c=$($PY "$SRC/scripts/hf_reference.py" "hf_$name" batch.h5 | awk '{print $2}')
  $PY -c "import sys; a, c = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - c) <= 1e-5 else 1)" "$a" "$c" \
    || fail "$name: lct's loss $a, the NumPy float64 reader's $c (more than 1e-5 apart)"
  echo "ok   $name: lct eval $a (checkpoint and export alike), NumPy float64 reader $c"
}
"$LCT" make-batch "${TINY[@]}" --out batch.h5 --sequences 2 > /dev/null
check_case untied
check_case tied --model.tie_word_embeddings true
check_case linear --model.rope_scaling linear --model.rope_scaling_factor 2
check_case yarn --model.rope_scaling yarn --model.rope_scaling_factor 4 --model.rope_original_length 64
grep -q "model.safetensors: 2[0-9] tensors, F32" export_untied.txt || { cat export_untied.txt; fail "export's report"; }

# A model trained with DCA and logit scaling: the export's "lct" object carries how it
# must be run (kernel, chunk, local size, temperatures, logit scaling), and lct eval and
# lct generate of the folder run it so (the checkpoint's loss and tokens), not as causal
"$LCT" train "${TINY[@]}" --attention.kernel dca --attention.dca_chunk_size 40 --attention.dca_local_size 8 \
  --attention.dca_mscale_original_length 32 --attention.logit_scaling logn --attention.logit_scaling_length 32 \
  --train.steps 2 --checkpoint.dir ck_dca > /dev/null
"$LCT" export --checkpoint ck_dca/step_00000002.h5 --out hf_dca > export_dca.txt
$PY - hf_dca/config.json <<'PY' || fail "the DCA export's lct object"
import json, sys
lct = json.load(open(sys.argv[1]))["lct"]
want = {"attention_kernel": "dca", "dca_chunk_size": 40, "dca_local_size": 8, "dca_mscale": 1.0,
        "dca_mscale_original_length": 32, "logit_scaling": "logn", "logit_scaling_length": 32}
assert all(lct.get(k) == v for k, v in want.items()), lct
PY
a=$(loss_of ck_dca/step_00000002.h5)
b=$(loss_of hf_dca)
c=$("$LCT" eval --checkpoint hf_dca --batch-file batch.h5 --threads 1 --attention.kernel causal \
    --attention.logit_scaling none | sed -E 's/^loss ([^ ]+) .*/\1/')
[[ $a == "$b" ]] || fail "dca export: lct eval of the checkpoint ($a) and of its export ($b) differ"
[[ $a != "$c" ]] || fail "dca export: evaluated as causal without logit scaling it gives the same loss ($a)"
echo "1 2 3 4 5 6 7 8" > prompt.ids
g1=$("$LCT" generate --checkpoint ck_dca/step_00000002.h5 --prompt-tokens prompt.ids --ids \
     --max-new-tokens 60 --threads 1 2>/dev/null)
g2=$("$LCT" generate --checkpoint hf_dca --prompt-tokens prompt.ids --ids --max-new-tokens 60 \
     --threads 1 2>/dev/null)
[[ -n $g1 && $g1 == "$g2" ]] || fail "dca export: generate of the checkpoint and of the export differ"
echo "ok   dca + logit scaling: the export's lct object runs it (eval $a, as causal $c; generate alike)"

# a re-export of a folder writes back the max_position_embeddings it read (issue 54
# cause 9: it wrote 2048 with a note that the length "is not in" the folder)
$PY - hf_untied/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 256
json.dump(c, open(sys.argv[1], "w"))
PY
"$LCT" export --checkpoint hf_untied --out hf_again > export_again.txt || fail "re-export of a folder"
grep -q '"max_position_embeddings": 256' hf_again/config.json && ! grep -q "note:" export_again.txt \
  || { cat export_again.txt; fail "re-export did not write back max_position_embeddings 256"; }
echo "ok   a re-export writes back the folder's max_position_embeddings"

# train.init_from: a fresh run's parameters are the folder's. lr 1e-30 (no warm-up) moves
# no parameter by a representable amount (every |p| here is above 1e-20, so p + 1e-30 and
# p (1 - 1e-31) round to p), so the step-1 checkpoint holds exactly what was loaded
same_params() {  # a.h5 b.h5 [bf16]
  $PY - "$@" <<'PY'
import sys, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
bf16 = len(sys.argv) > 3
def params(path):
    out = {}
    with h5py.File(path) as f:
        f["params"].visititems(lambda n, o: out.__setitem__(n, np.asarray(o[...], dtype=np.float32)) if isinstance(o, h5py.Dataset) else None)
    return out
pa, pb = params(a), params(b)
assert pa.keys() == pb.keys(), set(pa) ^ set(pb)
def rne(x):  # float32 rounded to the nearest bfloat16, ties to even
    u = x.view(np.uint32).astype(np.uint64)
    return (((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
for n in pa:
    want = rne(pa[n]) if bf16 else pa[n]
    assert np.min(np.abs(pa[n])) > 1e-20 or bf16, (n, "a parameter too small for the lr-1e-30 argument")
    if not np.array_equal(want.view(np.uint32), pb[n].view(np.uint32)):
        d = np.max(np.abs(want - pb[n]))
        sys.exit(f"{n}: differs by up to {d:.3g}")
print(f"{len(pa)} tensors {'equal to the bf16 rounding of' if bf16 else 'bit-identical to'} the original")
PY
}
init_run() {  # folder out-dir extra...
  local folder=$1 out=$2
  shift 2
  "$LCT" train --data.seq_len 128 --train.threads 1 --train.steps 1 --train.lr 1e-30 --train.min_lr 0 --train.warmup_steps 0 \
    --train.init_from "$folder" --checkpoint.dir "$out" "$@" > "$out.log"
}
init_run hf_untied init_untied
echo "ok   init_from fp32: $(same_params ck_untied/step_00000002.h5 init_untied/step_00000001.h5)"
grep -q "train.init_from: parameters from hf_untied" init_untied.log || fail "init_from is not logged"
init_run hf_yarn init_yarn
echo "ok   init_from fp32 (yarn, its RoPE keys from config.json): $(same_params ck_yarn/step_00000002.h5 init_yarn/step_00000001.h5)"
"$LCT" export --checkpoint ck_tied/step_00000002.h5 --out hf_tied16 --dtype bf16 > /dev/null
grep -q '"torch_dtype": "bfloat16"' hf_tied16/config.json || fail "bf16 export's torch_dtype"
init_run hf_tied16 init_tied16
echo "ok   init_from bf16 (tied): $(same_params ck_tied/step_00000002.h5 init_tied16/step_00000001.h5 bf16)"

# a sharded folder: the same tensors over two files and an index
$PY - hf_untied hf_sharded <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
(n,) = struct.unpack("<Q", raw[:8]); header = json.loads(raw[8:8 + n]); data = raw[8 + n:]
names = [k for k in header if k != "__metadata__"]
weight_map = {}
for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
    h, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for k in part:
        b, e = header[k]["data_offsets"]
        h[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"], "data_offsets": [at, at + e - b]}
        blobs.append(data[b:e]); at += e - b
    text = json.dumps(h).encode()
    name = f"model-0000{i + 1}-of-00002.safetensors"
    open(os.path.join(dst, name), "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    weight_map.update({k: name for k in part})
json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
open(os.path.join(dst, "config.json"), "w").write(open(os.path.join(src, "config.json")).read())
PY
[[ $(loss_of hf_sharded) == "$(loss_of hf_untied)" ]] || fail "the sharded folder's loss differs"
echo "ok   a sharded folder (index + 2 shards) evaluates as the single file"

# one-line errors, exit 1
expect_error() {  # message command...
  local msg=$1 out rc=0
  shift
  out=$("$@" 2>&1) || rc=$?
  [[ $rc == 1 ]] || { echo "$out"; fail "exit $rc for: $*"; }
  [[ $(wc -l <<< "$out") == 1 ]] || { echo "$out"; fail "not one line: $*"; }
  grep -qF -- "$msg" <<< "$out" || { echo "$out"; fail "missing '$msg'"; }
  echo "ok   error: $out"
}
expect_error "model.hidden_size = 64 on the command line, but train.init_from hf_untied has 32" \
  "$LCT" train --train.init_from hf_untied --model.hidden_size 64 --train.steps 1 --checkpoint.dir x
expect_error "train.init_from: missing: no such file or folder" \
  "$LCT" train --train.init_from missing --train.steps 1 --checkpoint.dir x
cp -r hf_untied hf_bad
printf '\xff\xff\xff\xff\xff\x00\x00\x00{}' > hf_bad/model.safetensors
expect_error "hf_bad/model.safetensors: the header length 1099511627775 is above the 100 MB limit" \
  "$LCT" eval --checkpoint hf_bad --batch-file batch.h5
expect_error "hf_bad/model.safetensors: the header length" \
  "$LCT" train --train.init_from hf_bad --train.steps 1 --checkpoint.dir x --data.seq_len 128
$PY - hf_sharded/model.safetensors.index.json <<'PY'
import json, sys
index = json.load(open(sys.argv[1]))
index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"  # it is in the second
json.dump(index, open(sys.argv[1], "w"))
PY
expect_error "model.safetensors.index.json: tensor 'model.norm.weight' is listed in" \
  "$LCT" eval --checkpoint hf_sharded --batch-file batch.h5
sed -i 's/"silu"/"gelu"/' hf_bad/config.json
expect_error "hf_bad/config.json: hidden_act: \"gelu\"" "$LCT" eval --checkpoint hf_bad --batch-file batch.h5
echo "hf_interop: all passed"
