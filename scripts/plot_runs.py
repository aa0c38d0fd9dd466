#!/usr/bin/env python3
"""Loss, tokens/s and idle of several lct runs in one PNG, one line per run.

  /usr/bin/python3 scripts/plot_runs.py RUN [RUN ...] [--names a,b,...] [--out runs.png]
                                        [--smooth N]

A RUN is a checkpoint folder (its metrics.jsonl), a metrics.jsonl file, or a checkpoint
(.h5, its /metrics group: the history up to that step). The legend shows the run's name
(--names, else the folder's or file's name). --smooth N plots the running mean of N
steps for the loss (tokens/s and idle are plotted as measured). Needs matplotlib
(`bash scripts/setup.sh --python`).
"""
import argparse
import json
import os
import sys

COLUMNS = ("step", "loss", "tokens_per_s", "idle_fraction")


def load(run):
    """The run's per-step metrics as a dict of lists (missing columns: None)."""
    if os.path.isdir(run):
        run = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(run):
        sys.exit(f"plot_runs: {run}: no such file")
    rows = {c: [] for c in COLUMNS}
    if run.endswith(".h5"):
        import h5py
        with h5py.File(run, "r") as f:
            if "metrics" not in f:
                sys.exit(f"plot_runs: {run}: no /metrics group")
            m = f["metrics"]
            n = len(m["step"])
            for c in COLUMNS:
                rows[c] = list(m[c][:]) if c in m else [None] * n
        return rows
    with open(run) as f:
        for i, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_runs: {run}:{i}: not JSON ({e.msg})")
            for c in COLUMNS:
                rows[c].append(r.get(c))
    if not rows["step"]:
        sys.exit(f"plot_runs: {run}: no steps")
    return rows


def running_mean(xs, n):
    out, acc = [], []
    for x in xs:
        acc.append(x)
        if len(acc) > n:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--names", help="comma-separated legend names, one per run")
    p.add_argument("--out", default="runs.png")
    p.add_argument("--smooth", type=int, default=1)
    a = p.parse_args()
    names = a.names.split(",") if a.names else [
        os.path.basename(os.path.normpath(r if os.path.isdir(r) else os.path.dirname(r) or r))
        for r in a.runs]
    if len(names) != len(a.runs):
        sys.exit(f"plot_runs: --names has {len(names)} names for {len(a.runs)} runs")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for run, name in zip(a.runs, names):
        m = load(run)
        steps = m["step"]
        ax[0].plot(steps, running_mean(m["loss"], max(1, a.smooth)), label=name)
        ax[1].plot(steps, m["tokens_per_s"], label=name)
        if any(x is not None for x in m["idle_fraction"]):
            ax[2].plot(steps, [100 * (x or 0) for x in m["idle_fraction"]], label=name)
    ax[0].set_title("loss" + (f" (mean of {a.smooth} steps)" if a.smooth > 1 else ""))
    ax[1].set_title("tokens/s")
    ax[2].set_title("idle (% of the step, mean over ranks)")
    for x in ax:
        x.set_xlabel("step")
        x.grid(alpha=0.3)
        x.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"plot_runs: {a.out} ({len(a.runs)} runs)")


if __name__ == "__main__":
    main()
