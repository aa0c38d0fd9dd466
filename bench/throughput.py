"""Throughput by the clock, from an lct run's metrics.jsonl rows: the one figure every
bench script and experiment reports.

    throughput = (sum of the measured steps' tokens) / (sum of their wall-clock seconds)

after the first `warmup` steps. A step's `ms` is rank 0's wall-clock time of the whole
step (data, forward, backward, every exchange and all-reduce, the optimizer), and the
ranks leave a step together (it ends in collectives), so the sum is the time a user
waits for those steps. Per-step percentiles of tokens/s (p10, p50, p90) may stand beside
it; they are not a throughput (a median of per-step rates drops the slow steps)."""
import json

WARMUP = 2  # steps left out by default: first-touch allocation, OpenMP and MPI warm-up


def load(path):
    """The rows of a run folder's metrics.jsonl (or of the file itself)."""
    if not path.endswith(".jsonl"):
        path = f"{path}/metrics.jsonl"
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def percentile(xs, q):
    """The q-th percentile (0-100) of xs, linear between order statistics."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def measured(rows, warmup=WARMUP):
    """The steps after the warm-up (all of them when the run is not longer than it)."""
    return rows[warmup:] if len(rows) > warmup else rows


def wall_clock(rows, warmup=WARMUP):
    """{tokens_per_s, seconds, tokens, steps, warmup, p10, p50, p90} of the measured steps."""
    m = measured(rows, warmup)
    seconds = sum(r["ms"] for r in m) / 1e3
    tokens = sum(r["tokens"] for r in m)
    rates = [r["tokens"] / (r["ms"] / 1e3) for r in m]
    return {
        "tokens_per_s": tokens / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
        "tokens": tokens,
        "steps": len(m),
        "warmup": len(rows) - len(m),
        "p10": percentile(rates, 10),
        "p50": percentile(rates, 50),
        "p90": percentile(rates, 90),
    }


def mean_over_time(rows, key, warmup=WARMUP):
    """A per-step figure averaged with each step weighted by its time (GFLOP/s: total
    FLOPs over total time)."""
    m = measured(rows, warmup)
    seconds = sum(r["ms"] for r in m)
    return sum(r.get(key, 0) * r["ms"] for r in m) / seconds if seconds > 0 else float("nan")
