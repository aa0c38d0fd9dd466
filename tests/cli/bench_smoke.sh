#!/bin/bash
# lct bench end to end at tiny sizes: valid JSON, every section filled, sane numbers;
# then bench/compare_pytorch.py at a tiny length (needs python3-torch, like the
# reference tests: scripts/setup.sh --python).
set -euo pipefail
LCT=$1
SRC=$2
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
out=$(mktemp)
first=$(mktemp)
trap 'rm -f "$out" "$out.beat" "$first" "$first".*' EXIT

"$LCT" bench --json --attention-lengths 300,700 --step-lengths 256,512 --step-precisions fp32,bf16 --repeats 2 --budget 5 \
  --model.num_hidden_layers 2 --attention.dca_chunk_size 128 --attention.dca_local_size 16 --train.heartbeat_s 0.05 \
  > "$out" 2> "$out.beat"
# its heartbeat (train.heartbeat_s, issue 57) on stderr, so stdout stays one JSON document
grep -qE '^bench: section (ceilings|gemm|attention|step) \([1-4] of 4\), [0-9]+ timed runs \| [0-9.]+ (s|min|h) in$' "$out.beat" \
  || { cat "$out.beat"; echo "FAIL: no bench heartbeat line on stderr"; exit 1; }
echo "ok   bench heartbeat: $(grep -c '^bench: section' "$out.beat") lines on stderr"
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["machine"]
assert m["openblas_core"] and m["threads"] >= 1, m
c = r["ceilings"]
assert c["sgemm_gflops"] > 0 and c["fma_gflops"] > 0 and c["onednn_f32_gflops"] > 0, c
# the fp32 ceiling is the faster of the two fp32 libraries lct can call
assert c["fp32_gemm_gflops"] == max(c["sgemm_gflops"], c["onednn_f32_gflops"]), c
assert (c["bf16_gemm_gflops"] > 0) == r["gemm"]["bf16_instructions"], c
assert c["bf16_dot_gflops"] >= 0, c
# memory bandwidth: STREAM copy and triad over arrays larger than any cache
assert c["stream_copy_gbps"] > 0 and c["stream_triad_gbps"] > 0 and c["stream_array_bytes"] == 128 << 20, c
g = r["gemm"]
# the model's products as it runs them: fused Q/K/V, O, fused gate/up, down, dx, dW, square
assert g["tokens"] == 2048 and len(g["rows"]) == 7 and g["bf16_kernel"], g
assert [(x["m"], x["n"], x["k"]) for x in g["rows"][:6]] == [
    (2048, 512, 256), (2048, 256, 256), (2048, 1376, 256), (2048, 256, 688), (2048, 256, 1376), (1376, 256, 2048)], g
for x in g["rows"]:
    assert x["fp32_gflops"] > 0 and x["bf16_gflops"] > 0 and x["bf16_fallback_gflops"] > 0, x
    assert (x["bf16_kernel_gflops"] > 0) == g["bf16_instructions"], x
    # lct's tile kernel where the CPU has bf16 instructions, except the weight gradient
    # (its transposed A would be packed per call: not measured)
    assert (x["lct_tiles_gflops"] > 0) == (g["bf16_instructions"] and x["product"] != "bwd dW = d^T x"), x
rows = r["attention"]["rows"]
assert [x["tokens"] for x in rows] == [300] * 8 + [700] * 8, rows
assert [x["layout"] for x in rows] == ["one-doc"] * 4 + ["packed"] * 4 + ["one-doc"] * 4 + ["packed"] * 4, rows
assert [x["kernel"] for x in rows] == ["causal", "causal", "dca", "dca"] * 4, rows
assert [x["precision"] for x in rows] == ["fp32", "bf16"] * 8, rows
assert all(x["fwd_bwd_vs_ceiling"] > 0 for x in rows), rows
assert all(x["time_vs_causal"] > 0 for x in rows if x["kernel"] == "dca"), rows
for x in rows:
    assert x["fwd_gflops"] > 0 and x["bwd_gflops"] > 0 and x["runs"] >= 1, x
    if x["layout"] == "one-doc":
        assert x["pairs"] == x["tokens"] * (x["tokens"] + 1) // 2, x
steps = r["step"]
assert [x["tokens"] for x in steps] == [256, 512] * 2, steps
assert [x["precision"] for x in steps] == ["fp32"] * 2 + ["bf16"] * 2, steps
for x in steps:
    assert x["tokens_per_s"] > 0 and x["peak_rss_bytes"] > 0 and x["activation_bytes"] > 0, x
    # MFU against the precision's ceilings (bf16 on a CPU without bf16 instructions: fp32's)
    bf16_ceilings = x["precision"] == "bf16" and g["bf16_instructions"]
    assert x["gemm_ceiling_gflops"] == (c["bf16_gemm_gflops"] if bf16_ceilings else c["fp32_gemm_gflops"]), x
    assert x["peak_ceiling_gflops"] == (c["bf16_dot_gflops"] if bf16_ceilings else c["fma_gflops"]), x
    # (the JSON's numbers carry 6 significant digits)
    assert abs(x["mfu_vs_gemm"] - x["gflops"] / x["gemm_ceiling_gflops"]) <= 1e-5 * x["mfu_vs_gemm"], x
    assert x["mfu_vs_peak"] > 0, x
print("bench_smoke: JSON ok")
PY
cp "$out" "$first"

# --ceilings-from: the first run's ceilings, not measured again (every ceiling equal, and
# the file named); refused in one line for another machine, a ceiling missing, of the
# wrong type or 0, a GEMM size that is none, a file that is not JSON, and beside
# --sections ceilings
"$LCT" bench --json --sections attention --attention-lengths 300 --attention-precisions fp32 --repeats 1 --budget 5 \
  --model.num_hidden_layers 2 --ceilings-from "$first" > "$out"
python3 - "$out" "$first" <<'PY'
import json, sys
r, first = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c, want = r["ceilings"], dict(first["ceilings"], **{"from": sys.argv[2]})
assert first["ceilings"]["from"] is None and c == want, (c, want)
rows = r["attention"]["rows"]
assert len(rows) == 4 and all(x["fwd_bwd_vs_fp32_gemm"] == x["fwd_bwd_gflops"] / c["fp32_gemm_gflops"] for x in rows), rows
for name, edit in (("cpu", lambda j: j["machine"].update(cpu="another CPU")),
                   ("threads", lambda j: j["machine"].update(threads=j["machine"]["threads"] + 1)),
                   ("missing", lambda j: j["ceilings"].pop("stream_triad_gbps")),
                   ("type", lambda j: j["ceilings"].update(fma_gflops="100")),
                   ("zero", lambda j: j["ceilings"].update(sgemm_gflops=0)),
                   ("size", lambda j: j["ceilings"].update(sgemm_n=0)),
                   # rates no CPU shows (issue 87: 1e-320 gave inf fractions)
                   ("tiny", lambda j: j["ceilings"].update(sgemm_gflops=1e-320)),
                   ("huge", lambda j: j["ceilings"].update(fma_gflops=1e300))):
    j = json.loads(json.dumps(first))
    edit(j)
    json.dump(j, open(f"{sys.argv[2]}.{name}", "w"))
open(f"{sys.argv[2]}.text", "w").write('{"ceilings": ')  # not JSON
print("bench_smoke: --ceilings-from ok")
PY
for c in "cpu|measured on 'another CPU'" "threads|threads and OpenBLAS core" "missing|ceilings.stream_triad_gbps must be present" \
         "type|ceilings.fma_gflops must be a number" "zero|ceilings.sgemm_gflops is 0, not a measured ceiling" \
         "size|ceilings.sgemm_n is 0, not a size" "text|not valid JSON" \
         "tiny|ceilings.sgemm_gflops is 1e-320, not a measured ceiling" "huge|ceilings.fma_gflops is 1e+300, not a measured ceiling"; do
  name=${c%%|*} want=${c#*|}
  rc=0
  err=$("$LCT" bench --sections attention --attention-lengths 300 --ceilings-from "$first.$name" 2>&1 >/dev/null) || rc=$?
  [[ $rc -eq 1 && $err == "lct: error: --ceilings-from $first.$name: "*"$want"* && $(grep -c . <<< "$err") -eq 1 ]] \
    || { echo "FAIL: --ceilings-from ($name): exit $rc, '$err'"; exit 1; }
done
err=$("$LCT" bench --sections ceilings,attention --ceilings-from "$first" 2>&1 >/dev/null) && { echo "FAIL: accepted"; exit 1; }
[[ $err == *"--sections ceilings measures the ceilings and --ceilings-from"* ]] || { echo "FAIL: '$err'"; exit 1; }
echo "bench_smoke: --ceilings-from refusals ok"

# the profile section: each phase's time per step at the config's length, split into the
# linear products and the rest, in both precisions (the CAD cost model follows it)
"$LCT" bench --json --sections profile --step-precisions fp32,bf16 --repeats 1 --budget 5 \
  --model.num_hidden_layers 2 --data.seq_len 256 --data.max_doc_len 256 > "$out"
python3 - "$out" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["profile"]
assert [(x["precision"], x["tokens"]) for x in rows] == [("fp32", 256), ("bf16", 256)], rows
for x in rows:
    p = x["phases"]
    assert x["steps"] >= 3 and x["step_ms"] > 0, x
    for name in ("before attention", "attention", "after attention", "after attention backward",
                 "attention backward", "before attention backward", "loss", "optimizer"):
        assert name in p, (name, sorted(p))
    # two layers: two spans per layer phase and step; products only in the linear phases
    assert p["before attention"]["spans"] == 2 * x["steps"], p["before attention"]
    for name, t in p.items():
        assert 0 <= t["product_ms_per_step"] <= t["ms_per_step"], (name, t)
    for name in ("before attention", "after attention", "before attention backward", "after attention backward"):
        assert p[name]["product_ms_per_step"] > 0, (name, p[name])
    assert p["attention"]["product_ms_per_step"] == 0 and p["optimizer"]["product_ms_per_step"] == 0, p
    assert sum(t["ms_per_step"] for t in p.values()) <= x["step_ms"] * 1.001, x
    # the work around the model is traced too (the untraced rest is the loop's overhead)
    for name in ("batches", "zero gradients", "weight copies", "gradient norm"):
        assert p[name]["spans"] == x["steps"], (name, p[name])
    # the split: products, core attention, the rest and the untraced time make the step
    sp = x["split"]
    assert sp["tokens"] == 256 and sp["product_flops"] > 0 and sp["attention_flops"] > 0, sp
    assert abs(sp["products_ms"] + sp["attention_ms"] + sp["other_ms"] + sp["untraced_ms"] - x["step_ms"]) \
        <= 1e-6 * x["step_ms"], (sp, x["step_ms"])
    assert abs(sp["products_ms"] - sum(t["product_ms_per_step"] for t in p.values())) <= 1e-9 * x["step_ms"], sp
    assert abs(sp["attention_ms"] - sum(t["ms_per_step"] for n, t in p.items() if n.startswith("attention"))) \
        <= 1e-9 * x["step_ms"], sp
    assert sp["products_gflops"] > 0 and sp["attention_gflops"] > 0 and sp["other_ns_per_token"] > 0, sp
print("bench_smoke: profile ok")
PY

# under full recomputation the repeated forward has spans of its own, nested in none:
# its phases add up to at most the step (they counted twice when a recompute span
# enclosed the "before attention" span it ran)
"$LCT" bench --json --sections profile --step-precisions fp32 --repeats 1 --budget 5 --train.recompute full \
  --model.num_hidden_layers 2 --data.seq_len 256 --data.max_doc_len 256 > "$out"
python3 - "$out" <<'PY'
import json, sys
x = json.load(open(sys.argv[1]))["profile"][0]
p = x["phases"]
assert p["recompute before attention"]["spans"] == 2 * x["steps"], p
assert p["recompute attention"]["spans"] == 2 * x["steps"], p
assert p["before attention"]["spans"] == 2 * x["steps"], p  # the first forward's only
assert sum(t["ms_per_step"] for t in p.values()) <= x["step_ms"] * 1.001, x
print("bench_smoke: recompute profile ok")
PY

# the context-parallel balance section: zigzag balances, contiguous does not
"$LCT" bench --json --sections cp_balance --cp-degrees 2,4 --balance-sequences 4 > "$out"
python3 - "$out" <<'PY'
import json, sys
rows = {(x["cp"], x["split"]): x for x in json.load(open(sys.argv[1]))["cp_balance"]}
assert set(rows) == {(2, "zigzag"), (2, "contiguous"), (4, "zigzag"), (4, "contiguous")}, rows
for cp in (2, 4):
    z, c = rows[(cp, "zigzag")], rows[(cp, "contiguous")]
    assert 1.0 <= z["mean_max_over_mean"] < c["mean_max_over_mean"], (z, c)
print("bench_smoke: cp_balance ok")
PY
# the CAD planner alone: balances within its tolerance where colocated does not
"$LCT" bench --json --sections cad_balance --cad-ranks 2,8 --balance-sequences 16 > "$out"
python3 - "$out" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["cad_balance"]
assert [x["ranks"] for x in rows] == [2, 8], rows
for x in rows:
    assert x["cad_worst_max_over_mean"] <= 1.1 + 1e-9 < x["colocated_max_over_mean"], x
print("bench_smoke: cad_balance ok")
PY

# bad options are one-line errors
if "$LCT" bench --sections nonsense 2>/dev/null; then echo "bad --sections accepted"; exit 1; fi
if "$LCT" bench --step-precisions fp16 2>/dev/null; then echo "bad --step-precisions accepted"; exit 1; fi

if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "bench_smoke: needs python3-torch for bench/compare_pytorch.py; run scripts/setup.sh --python" >&2
  exit 1
fi
/usr/bin/python3 "$SRC/bench/compare_pytorch.py" --lct "$LCT" --length 128 --steps 1 \
  --oom-length 0 --json > "$out"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); p=r['precisions']; assert set(p) == {'fp32', 'bf16'} and all(x['speedup'] > 0 for x in p.values()), r; print('compare_pytorch: ok, speedup fp32', round(p['fp32']['speedup'], 2), 'bf16', round(p['bf16']['speedup'], 2))" "$out"
