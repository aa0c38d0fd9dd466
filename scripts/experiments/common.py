"""Shared by the experiment scripts: running lct, and writing CSV, markdown and PNG.

Every experiment takes --out DIR (default results/<name>) and --quick (a tiny model and
few steps, for the test suite), writes DIR/<name>.csv, DIR/<name>.md and DIR/<name>.png,
and prints the markdown table.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from throughput import wall_clock  # noqa: E402  (the one throughput figure: tokens / wall-clock time)
LCT = os.environ.get("LCT", os.path.join(ROOT, "build", "lct"))
# a model small enough for --quick runs in the test suite
QUICK_MODEL = ["--model.hidden_size", "64", "--model.intermediate_size", "128",
               "--model.num_hidden_layers", "2", "--model.num_attention_heads", "4",
               "--model.num_key_value_heads", "2", "--data.seq_len", "512",
               "--data.max_doc_len", "512"]


# A heartbeat like lct's (src/util/heartbeat.h): while an lct run of the experiment has
# taken longer than LCT_HEARTBEAT_S seconds (default 30; 0 = never), a line on stderr
# every that many seconds says which run it is and how long it and the experiment have
# taken (the runs' output is captured, so lct's own heartbeat lines do not show):
#   placements: run 7 (lct train, 4 ranks) | 95 s in | the experiment 12.5 min in
EXPERIMENT = os.path.splitext(os.path.basename(sys.argv[0]))[0]
_STARTED = time.monotonic()
_RUNS = [0]


def duration_text(s):
    """4.2 s, 75 s, 12.5 min, 3.1 h (as lct's heartbeat writes them)."""
    if s < 10:
        return f"{s:.1f} s"
    if s < 600:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def heartbeat_interval():
    text = os.environ.get("LCT_HEARTBEAT_S", "30")
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not value >= 0 or value == float("inf"):
        sys.exit(f"{EXPERIMENT}: LCT_HEARTBEAT_S must be a number of seconds >= 0 (0 = never), got '{text}'")
    return value


def run(cmd, what, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True, **kwargs) with the heartbeat;
    `what` names the run in its lines ("lct train, 4 ranks")."""
    _RUNS[0] += 1
    number, interval, start = _RUNS[0], heartbeat_interval(), time.monotonic()
    done = threading.Event()

    def beat():
        # waits of at most a second, as lct's own heartbeat: Event.wait of a huge interval
        # (1e10 s) overflows, and any finite interval is a valid setting
        due = start + interval
        while not done.wait(max(0.0, min(1.0, due - time.monotonic()))):
            now = time.monotonic()
            if now < due:
                continue
            due = now + interval
            print(f"{EXPERIMENT}: run {number} ({what}) | {duration_text(now - start)} in | "
                  f"the experiment {duration_text(now - _STARTED)} in", file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, daemon=True) if interval > 0 else None
    if thread:
        thread.start()
    try:
        return subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    finally:
        done.set()
        if thread:
            thread.join()


def arguments(name, description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default=os.path.join(ROOT, "results", name))
    p.add_argument("--quick", action="store_true", help="tiny model, few steps (for tests)")
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "default.toml"))
    a = p.parse_args()
    if not os.access(LCT, os.X_OK):
        sys.exit(f"{name}: no lct binary at {LCT} (bash scripts/build.sh)")
    os.makedirs(a.out, exist_ok=True)
    for name in ("calibration.txt", "ceilings.json"):  # a calibration and the ceilings are per run of an experiment
        stale = os.path.join(a.out, name)
        if os.path.exists(stale):
            os.remove(stale)
    return a


def quick_model(quick, args):
    """The quick model's options, less those that args set themselves."""
    if not quick:
        return []
    out = []
    for key, value in zip(QUICK_MODEL[::2], QUICK_MODEL[1::2]):
        if key not in args:
            out += [key, value]
    return out


def lct(args, quick, config, refusal=False):
    """Runs `lct ARGS` with the config (and the quick model); returns stdout. With
    refusal, a run that exits 1 with an error line last (a refused plan) returns
    (None, that line) and one that ran (stdout, "")."""
    # eval, generate and export read the checkpoint's model
    with_config = ["--config", config] if args[0] not in ("eval", "generate", "export") else []
    cmd = [LCT] + args[:1] + with_config + quick_model(quick, args) + args[1:]
    r = run(cmd, f"lct {args[0]}")
    lines = r.stderr.strip().splitlines()
    if refusal and r.returncode == 1 and lines and lines[-1].startswith("lct: error"):
        return None, lines[-1]
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr.strip()}")
    return (r.stdout, "") if refusal else r.stdout


def ceilings(quick, config, out):
    """lct bench's options for an experiment's ceilings: measured by the first call (lct
    bench --sections ceilings, kept in OUT/ceilings.json) and read by every bench call of
    the experiment (--ceilings-from), so that all its rows share one measurement."""
    path = os.path.join(out, "ceilings.json")
    if not os.path.exists(path):
        text = lct(["bench", "--json", "--sections", "ceilings", "--repeats", "1" if quick else "3",
                    "--budget", "2" if quick else "20"], quick, config)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return ["--ceilings-from", path]


def simulate(args, quick, config, out, refusal=False):
    """lct simulate --json; every call of an experiment shares one calibration (the
    first call's, kept in OUT/calibration.txt), so its predictions differ only by layout.
    With refusal, (prediction, "") or (None, the run plan's one-line refusal): lct
    simulate checks the plan before it calibrates or simulates."""
    cal = os.path.join(out, "calibration.txt")
    reuse = ["--calibration", cal] if os.path.exists(cal) else ["--calibration-out", cal]
    text = lct(["simulate", "--json", "--train.threads", "1"] + reuse + args, quick, config, refusal)
    if refusal:
        return (json.loads(text[0].strip().splitlines()[-1]), "") if text[0] is not None else text
    return json.loads(text.strip().splitlines()[-1])


# The papers' setup for `lct simulate --tflops`: Llama-3-8B's shape (DistCA Table 2) on
# the machine DistCA's cost model assumes (990 TFLOP/s, 50 GB/s).
PAPER_8B = ["--model.hidden_size", "4096", "--model.intermediate_size", "14336", "--model.num_hidden_layers", "32",
            "--model.num_attention_heads", "32", "--model.num_key_value_heads", "8", "--model.vocab_size", "128256",
            "--tflops", "990", "--bandwidth", "50", "--latency", "5"]


def simulate_paper(args, config):
    """lct simulate --json with analytic costs of the papers' model and machine."""
    text = lct(["simulate", "--json"] + PAPER_8B + args, False, config)
    return json.loads(text.strip().splitlines()[-1])


def mpi_train(ranks, args, quick, config, out_dir):
    """lct train under mpirun (one thread per rank); returns the metrics rows."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_WAIT_POLICY="PASSIVE")
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), LCT, "train",
           "--config", config] + quick_model(quick, args) + [
           "--train.threads", "1", "--checkpoint.every", "0", "--checkpoint.dir", out_dir,
           "--checkpoint.overwrite", "true"] + args  # a rerun of the experiment replaces its runs
    r = run(cmd, f"lct train, {ranks} ranks", env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl"))]


def write_outputs(out, name, rows, columns, title, notes=""):
    """CSV and a markdown table of rows (dicts); returns the markdown."""
    with open(os.path.join(out, f"{name}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})
    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    md = [f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    if notes:
        md += ["", notes]
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write(text)
    return text


def subplots(*args, **kwargs):
    """Every experiment's figure and axes: matplotlib's subplots, drawn off screen (Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(*args, **kwargs)


def plot_simulated_and_measured(ax, rows, x, y, color, sim_label, meas_label, **match):
    """The rows whose fields equal match, simulated as a line and measured as stars, of y
    against x in one color (rows without y are left out)."""
    for source, style, label, size in (("simulated", "o-", sim_label, None), ("measured", "*", meas_label, 12)):
        rs = [r for r in rows if r["source"] == source and y in r and all(r[k] == v for k, v in match.items())]
        ax.plot([r[x] for r in rs], [r[y] for r in rs], style, color=color, markersize=size, label=label)


def log2_axes(ax, xlabel, ylabel=None, title=None, logy=False, legend=None):
    """An axis over powers of two (and y too when logy), labelled, with a light grid and,
    unless legend is False, a legend at font size legend (None: matplotlib's default)."""
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log", base=2)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend is not False:
        ax.legend(fontsize=legend)


def save_figure(fig, out, name):
    """Every experiment's figure: laid out, saved as NAME.png in its folder at 110 dpi."""
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}.png"), dpi=110)
