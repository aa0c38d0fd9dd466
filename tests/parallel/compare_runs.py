"""Compare two lct runs: per-step losses (metrics.jsonl) and the parameters of their
newest checkpoints. Usage: compare_runs.py LABEL RUN_A RUN_B [LOSS_RTOL PARAM_RTOL], or
compare_runs.py --serve: the same arguments a line on stdin, tab-separated, a reply each.

Exit 0 when every loss agrees within LOSS_RTOL (relative, default 1e-6) and every
parameter within PARAM_RTOL of the tensor's largest magnitude (default 1e-5).

Where the defaults come from. Two layouts of one run compute the same sums in another
order (a weight gradient sums over the tokens of every rank and micro-batch; attention
sums over key rows in other blocks), so float32 results differ by rounding alone. With
unit roundoff u = 2^-24 = 6.0e-8, a sum of n terms reordered changes by at most about
n * u of the sum of the terms' magnitudes; the tests' sums are over one sequence's
128-256 rows at a time before they are added up, so n * u is 7.6e-6 to 1.5e-5 in the
worst case and sqrt(n) * u = 0.7e-6 to 1e-6 for random rounding.
  - Loss (1e-6): the loss is a mean of per-token terms of similar size, so its relative
    difference is of the order sqrt(n) * u plus what earlier steps' parameter
    differences add (first-order in them, below 1e-6 while they stay below 1e-5).
  - Parameters under SGD (1e-5): p_T = p_0 - sum_t lr_t g_t is linear in the
    gradients, so a gradient element off by e * (its terms' magnitudes) moves the
    parameter by lr_t * e * that; the tests' lr (0.3 falling to 0.03) keeps each
    update below the tensor's largest magnitude, so ten steps stay within the n * u
    bound relative to that largest magnitude, 1e-5.
  - AdamW is compared only between layouts that compute the same sums in the same order
    (tolerance 0): its update m / (sqrt(v) + eps) with eps = 1e-8 divides a near-zero
    gradient element by its own magnitude, so a last-bit difference of such an element
    becomes a difference of up to lr in the parameter, which no bound of rounding
    alone can contain."""
import glob
import json
import sys

import h5py
import numpy as np


def compare(label, a, b, loss_rtol=1e-6, param_rtol=1e-5):
    """The comparison's line ("ok   ..." or "FAIL ...") and whether it passed."""
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
    return (f"{'ok  ' if ok else 'FAIL'} {label}: {len(la)} steps, max loss rel diff {loss_err:.2e}, "
            f"max param rel diff {worst:.2e}"), ok


def arguments(args):
    label, a, b = args[:3]
    return label, a, b, *(float(x) for x in args[3:5])


if sys.argv[1:] == ["--serve"]:
    # One request a line on stdin, the arguments separated by tabs; one reply line each
    # (the comparison's line, or FAIL and the error), flushed. mpi_common.sh's compare
    # starts this once per script (Python with numpy and h5py takes a third of a second
    # to start; the scripts compare about 270 pairs).
    for request in sys.stdin:
        args = request.rstrip("\n").split("\t")
        try:
            line, _ = compare(*arguments(args))
        except Exception as e:  # a missing run or a different step count: this comparison fails
            line = f"FAIL {args[0]}: {type(e).__name__}: {e}".replace("\n", " ")
        print(line, flush=True)
else:
    line, ok = compare(*arguments(sys.argv[1:]))
    print(line)
    sys.exit(0 if ok else 1)
