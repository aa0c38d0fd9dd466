"""Compare two lct runs: per-step losses (metrics.jsonl) and the parameters of their
newest checkpoints. Usage: compare_runs.py LABEL RUN_A RUN_B [LOSS_RTOL PARAM_RTOL]

Exit 0 when every loss agrees within LOSS_RTOL (relative, default 1e-6) and every
parameter within PARAM_RTOL of the tensor's largest magnitude (default 1e-5)."""
import glob
import json
import sys

import h5py
import numpy as np

label, a, b = sys.argv[1:4]
loss_rtol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-6
param_rtol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-5
la = [json.loads(line)["loss"] for line in open(f"{a}/metrics.jsonl")]
lb = [json.loads(line)["loss"] for line in open(f"{b}/metrics.jsonl")]
assert len(la) == len(lb), (label, len(la), len(lb))
loss_err = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(la, lb))
fa, fb = sorted(glob.glob(f"{a}/step_*.h5"))[-1], sorted(glob.glob(f"{b}/step_*.h5"))[-1]
worst = 0.0
with h5py.File(fa) as A, h5py.File(fb) as B:
    names = []
    A["params"].visit(lambda n: names.append(n) if isinstance(A["params"][n], h5py.Dataset) else None)
    assert names, f"{fa}: no parameters"
    for n in names:
        x, y = A["params"][n][...].astype(np.float64), B["params"][n][...].astype(np.float64)
        worst = max(worst, float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)))
ok = loss_err <= loss_rtol and worst <= param_rtol
print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(la)} steps, max loss rel diff {loss_err:.2e}, "
      f"max param rel diff {worst:.2e}")
sys.exit(0 if ok else 1)
