#!/usr/bin/python3
"""Load an lct checkpoint into a plain Hugging Face Llama state dict (NumPy or PyTorch).

    checkpoint_to_state_dict.py CKPT.h5                   # print config and tensors
    checkpoint_to_state_dict.py CKPT.h5 --npz OUT.npz     # save arrays by HF name
    checkpoint_to_state_dict.py CKPT.h5 --torch OUT.pt    # torch.save(state_dict)
    checkpoint_to_state_dict.py CKPT.h5 --config-json OUT.json   # LlamaConfig-style dict

Tensors live under /params with the Hugging Face parameter name's dots turned into
slashes, at their global shapes ([out, in] for linear layers), so the state dict is
just a walk over /params. Needs python3-h5py and python3-numpy (python3-torch for --torch).
"""
import argparse
import json
import sys

import h5py
import numpy as np


def load_state_dict(path):
    """-> (config dict with LlamaConfig names, {hf_name: float32 ndarray})."""
    with h5py.File(path, "r") as f:
        if "params" not in f or "model" not in f:
            raise SystemExit(f"{path}: not an lct parameter file (needs /params and /model)")
        config = {}
        for key, value in f["model"].attrs.items():
            if isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, np.generic):
                value = value.item()
            config[key] = value
        config["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", 0))
        state = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                state[name.replace("/", ".")] = np.asarray(obj[...], dtype=np.float32)

        f["params"].visititems(visit)
    return config, state


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--npz")
    ap.add_argument("--torch")
    ap.add_argument("--config-json")
    args = ap.parse_args()
    try:
        config, state = load_state_dict(args.checkpoint)
    except OSError as e:
        print(f"error: {args.checkpoint}: {e}", file=sys.stderr)
        return 2
    n = sum(v.size for v in state.values())
    print(f"{args.checkpoint}: {len(state)} tensors, {n / 1e6:.3f}M parameters")
    print("config: " + json.dumps(config, sort_keys=True))
    for name, value in state.items():
        print(f"  {name:52s} {str(list(value.shape)):14s} norm {np.linalg.norm(value):.4e}")
    if args.npz:
        np.savez(args.npz, **state)
    if args.config_json:
        with open(args.config_json, "w") as out:
            json.dump(config, out, indent=2, sort_keys=True)
    if args.torch:
        import torch
        torch.save({k: torch.from_numpy(v) for k, v in state.items()}, args.torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
