#!/usr/bin/env bash
# scripts/checkpoint_to_state_dict.py turns an lct checkpoint into a Hugging Face Llama
# state dict (NumPy and PyTorch) with the Llama names, shapes and lct's exact values.
set -euo pipefail
LCT=$1
SRC=$2
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
"$LCT" train $(model_keys 32 48 2 4 2) --data.seq_len 128 --train.steps 2 --checkpoint.dir ck > /dev/null
/usr/bin/python3 "$SRC/scripts/checkpoint_to_state_dict.py" ck/step_00000002.h5 --npz sd.npz --torch sd.pt --config-json cfg.json > export.txt
/usr/bin/python3 - <<'PY'
import json, h5py, numpy as np, torch
sd = np.load("sd.npz")
cfg = json.load(open("cfg.json"))
L = cfg["num_hidden_layers"]
want = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
for i in range(L):
    for n in ["input_layernorm", "post_attention_layernorm"]:
        want.add(f"model.layers.{i}.{n}.weight")
    for n in ["q_proj", "k_proj", "v_proj", "o_proj"]:
        want.add(f"model.layers.{i}.self_attn.{n}.weight")
    for n in ["gate_proj", "up_proj", "down_proj"]:
        want.add(f"model.layers.{i}.mlp.{n}.weight")
assert set(sd.files) == want, set(sd.files) ^ want
C, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
assert sd["model.layers.0.self_attn.k_proj.weight"].shape == (KV * C // H, C)
with h5py.File("ck/step_00000002.h5") as f:
    for k in sd.files:
        assert np.array_equal(sd[k], f["params/" + k.replace(".", "/")][...]), k
pt = torch.load("sd.pt")
assert all(torch.equal(pt[k], torch.from_numpy(sd[k])) for k in sd.files)
print("export_state_dict: names, shapes and values match")
PY
