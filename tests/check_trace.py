"""Checks a timeline written by lct train --trace.path against the run's metrics, or
one written by lct simulate --trace.path against its --json output.

  python3 check_trace.py TRACE.json METRICS.jsonl RANKS
  python3 check_trace.py TRACE.json SIMULATE.json RANKS

- valid Chrome trace-event JSON: every complete event has pid, tid, name, ts >= 0 and
  dur >= 0; every rank is a named process with named compute / wait / step tracks;
- on every rank's every track the spans never overlap;
- every step's wait (idle) spans, summed per rank over the rank's step span and
  averaged over ranks, over rank 0's step time, equal the logged idle fraction within
  5% of the step (the trainer's idle figure sums the same waits); for a simulation, the
  mean over its steps equals the predicted idle fraction within 5%.
"""
import json
import sys
from collections import defaultdict

trace_path, metrics_path, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
doc = json.load(open(trace_path))
events = doc["traceEvents"]
spans = defaultdict(list)  # (pid, tid) -> [(ts, end, name, args)]
names = {}
tracks = defaultdict(set)
for e in events:
    if e["ph"] == "M":
        if e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e["name"] == "thread_name":
            tracks[e["pid"]].add(e["args"]["name"])
        continue
    assert e["ph"] == "X", e
    for key in ("pid", "tid", "name", "ts", "dur"):
        assert key in e, (key, e)
    assert e["ts"] >= 0 and e["dur"] >= 0, e
    spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"], e.get("args", {})))
assert sorted(names) == list(range(ranks)), names
for r in range(ranks):
    assert {"compute", "wait (blocked in MPI)", "steps"} <= tracks[r], tracks[r]
    assert spans[(r, 0)] and spans[(r, 2)], f"rank {r} has no compute or step spans"
for (pid, tid), s in spans.items():
    s.sort()
    for a, b in zip(s, s[1:]):
        assert b[0] >= a[1] - 1e-3, f"rank {pid} track {tid}: '{a[2]}' [{a[0]}, {a[1]}) overlaps '{b[2]}' at {b[0]}"

metrics = [json.loads(l) for l in open(metrics_path)]
steps = {r: {s[3]["step"]: (s[0], s[1]) for s in spans[(r, 2)]} for r in range(ranks)}


def trace_idle(k):
    t0, t1 = steps[0][k]
    idle = 0.0
    for r in range(ranks):
        b, e = steps[r][k]
        idle += sum(min(w[1], e) - max(w[0], b) for w in spans[(r, 1)] if w[1] > b and w[0] < e)
    return idle / (ranks * (t1 - t0))


worst = 0.0
if len(metrics) == 1 and "layout" in metrics[0]:  # lct simulate --json: the mean over its steps
    idle = sum(trace_idle(k) for k in steps[0]) / len(steps[0])
    worst = abs(idle - metrics[0]["idle_fraction"])
    assert worst <= 0.05, (idle, metrics[0]["idle_fraction"])
for m in metrics:
    k = m.get("step")
    if k not in steps[0]:  # a step from before a resume: not in this run's timeline
        continue
    idle = trace_idle(k)
    worst = max(worst, abs(idle - m["idle_fraction"]))
    assert abs(idle - m["idle_fraction"]) <= 0.05, (k, idle, m["idle_fraction"])
count = sum(len(s) for s in spans.values())
print(f"ok   {trace_path}: {ranks} ranks, {count} spans, no overlaps per track, idle from the "
      f"trace within {100 * worst:.2f} points of the logged idle over {len(metrics)} steps")
