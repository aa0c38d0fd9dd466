#!/usr/bin/env bash
# lct simulate on a tiny model: JSON figures for dp = 1 and 2 (colocated, packing, CAD
# with and without ping-pong) are present and sane (CAD balances attention pairs within
# the tolerance and moves bytes; colocated moves none; dp = 2 predicts more tokens/s than
# dp = 1), the same prediction twice gives the same balance figures, and unsupported
# layouts or bad options are one-line errors; a 2-stage pipeline shows its bubble and a
# cp = 2 ring its bytes.
set -euo pipefail
LCT=$1
MODEL="--model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
  --model.num_attention_heads 4 --model.num_key_value_heads 2 --data.seq_len 512
  --data.max_doc_len 512 --train.threads 1"
# every prediction below uses one calibration, measured once: two separately measured
# calibrations can differ by more than dp = 2 gains over dp = 1 when a core is busy
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
"$LCT" simulate $MODEL --ranks 1 --steps 1 --calibration-steps 2 --calibration-out "$work/cal.txt" > /dev/null
sim() { "$LCT" simulate $MODEL --steps 6 --calibration "$work/cal.txt" --json "$@"; }
one=$(sim --ranks 1)
col=$(sim --ranks 2)
pack=$(sim --ranks 2 --parallel.dp_balance packing)
# (pairs: the planner's balance is then checkable in pairs; the default, measured time,
# is predicted once below)
cad=$(sim --ranks 2 --attention.placement cad --attention.cad_pingpong true --attention.cad_profile pairs)
cad_again=$(sim --ranks 2 --attention.placement cad --attention.cad_pingpong true --attention.cad_profile pairs)
single=$(sim --ranks 2 --attention.placement cad --attention.cad_profile pairs)
cad4=$(sim --ranks 4 --attention.placement cad --train.micro_batches 2 --attention.cad_profile pairs)
cad_time=$(sim --ranks 2 --attention.placement cad)
pp=$(sim --ranks 2 --parallel.pp 2 --train.micro_batches 4)
cp=$(sim --ranks 2 --parallel.cp 2)
# recomputation: the same calibration, so its cost and its memory are the only changes
rc_none=$(sim --ranks 2 --train.recompute none)
rc_sel=$(sim --ranks 2 --train.recompute selective)
rc_full=$(sim --ranks 2 --train.recompute full)
/usr/bin/python3 - "$rc_none" "$rc_sel" "$rc_full" <<'PY'
import json, sys
none, sel, full = (json.loads(a) for a in sys.argv[1:])
assert none["recompute"] == "none" and sel["recompute"] == "selective" and full["recompute"] == "full"
assert none["step_seconds"] < sel["step_seconds"] < full["step_seconds"], (none, sel, full)
assert none["memory_per_rank_bytes"] > sel["memory_per_rank_bytes"] > full["memory_per_rank_bytes"], (none, sel, full)
assert full["calibration"]["recompute_attention_per_pair_layer"] > 0 == sel["calibration"]["recompute_attention_per_pair_layer"]
assert none["stored_bytes_per_token"] > sel["stored_bytes_per_token"] > full["stored_bytes_per_token"] > 0
print(f"ok   simulate recompute: step {none['step_seconds']*1e3:.1f} / {sel['step_seconds']*1e3:.1f} / "
      f"{full['step_seconds']*1e3:.1f} ms, memory {none['memory_per_rank_bytes']/2**20:.0f} / "
      f"{sel['memory_per_rank_bytes']/2**20:.0f} / {full['memory_per_rank_bytes']/2**20:.0f} MiB (none / selective / full)")
PY
# a mask: the same calibration, so only the pairs change: a sliding window's step is
# predicted faster, and CAD balances the pairs it lets through
mask_causal=$(sim --ranks 2 --attention.placement cad --attention.cad_profile pairs)
mask_sliding=$(sim --ranks 2 --attention.placement cad --attention.cad_profile pairs --attention.mask sliding_window --attention.window 64)
/usr/bin/python3 - "$mask_causal" "$mask_sliding" <<'PY'
import json, sys
causal, sliding = (json.loads(a) for a in sys.argv[1:])
assert sliding["step_seconds"] < causal["step_seconds"], (causal, sliding)
assert sliding["attention_pairs_max_over_mean"] != causal["attention_pairs_max_over_mean"], (causal, sliding)
assert sliding["attention_pairs_served_max_over_mean"] <= 1.1 + 1e-9, sliding
print(f"ok   simulate masks: step {causal['step_seconds']*1e3:.1f} ms causal, {sliding['step_seconds']*1e3:.1f} ms "
      f"sliding window 64; CAD pairs max/mean {sliding['attention_pairs_max_over_mean']:.3f} -> "
      f"{sliding['attention_pairs_served_max_over_mean']:.3f}")
PY
/usr/bin/python3 - "$one" "$col" "$pack" "$cad" "$cad_again" "$single" "$cad4" "$pp" "$cp" "$cad_time" <<'PY'
import json, sys
one, col, pack, cad, again, single, cad4, pp, cp, cad_time = (json.loads(a) for a in sys.argv[1:])
assert cad_time["tokens_per_s"] > 0 and cad_time["exchange_bytes_per_rank"] >= 0, cad_time
# a 1F1B pipeline of 2 stages and 4 micro-batches idles at least (pp-1)/(m+pp-1) = 20%
# (more here: the tiny model's last stage also runs the loss over a large vocabulary)
assert 0.15 < pp["bubble_fraction"] < 0.6 and col["bubble_fraction"] == 0, (pp, col)
assert cp["layout"] == "dp 1 x pp 1 x cp 2" and cp["exchange_bytes_per_rank"] > 0, cp
for r in (one, col, pack, cad, single, cad4, pp, cp):
    for k in ("step_seconds", "tokens_per_s", "compute_max_over_mean", "idle_fraction",
              "attention_pairs_max_over_mean", "attention_pairs_served_max_over_mean",
              "exchange_bytes_per_rank", "calibration"):
        assert k in r, (k, r)
    assert r["step_seconds"] > 0 and 0 <= r["idle_fraction"] < 1, r
assert col["tokens_per_s"] > one["tokens_per_s"], (col, one)
assert col["exchange_bytes_per_rank"] == 0 and cad["exchange_bytes_per_rank"] > 0
for r in (cad, single, cad4):
    assert r["attention_pairs_served_max_over_mean"] <= 1.1 + 1e-9, r
assert cad["attention_pairs_served_max_over_mean"] == again["attention_pairs_served_max_over_mean"]
assert cad["exchange_bytes_per_rank"] == again["exchange_bytes_per_rank"]
assert cad["placement"] == "cad (ping-pong)" and single["placement"] == "cad (one exchange at a time)"
print(f"ok   simulate: dp=1 {one['tokens_per_s']:.0f} tok/s, dp=2 colocated {col['tokens_per_s']:.0f}, "
      f"packing {pack['tokens_per_s']:.0f}, CAD {cad['tokens_per_s']:.0f} (pairs "
      f"{cad['attention_pairs_max_over_mean']:.3f} -> {cad['attention_pairs_served_max_over_mean']:.3f})")
PY
expect_error() {  # message args...
  local msg=$1 out rc=0
  shift
  out=$("$LCT" simulate $MODEL --steps 1 --calibration-steps 1 "$@" 2>&1) || rc=$?
  [ "$rc" = 1 ] || { echo "$out"; echo "FAIL: exit $rc, expected 1"; exit 1; }
  grep -q -- "$msg" <<< "$out" || { echo "$out"; echo "FAIL: missing '$msg'"; exit 1; }
  echo "ok   error: $msg"
}
expect_error "--hosts 3 must divide --ranks 2" --ranks 2 --hosts 3
expect_error "--tflops replaces the calibration" --ranks 2 --tflops 100 --calibration-out x.txt
expect_error "parallel.pp = 3 must divide model.num_hidden_layers = 2" --ranks 3 --parallel.pp 3
expect_error "parallel.dp x parallel.pp x parallel.cp = 4 x 1 x 1 = 4" --ranks 2 --parallel.dp 4
expect_error "attention.cad_profile: cannot open 'missing.txt'" --ranks 2 --profile missing.txt
# a crafted calibration's counts and costs are range-checked (issue 87: tokens = nan was
# converted to an integer, "on -9223372036854775808 tokens"; 1e300 costs accepted)
for edit in "tokens|nan|tokens = nan is not a whole number" "tokens|1e300|tokens = 1e+300 is not a whole number" \
            "tokens|2.5|tokens = 2.5 is not a whole number" "pairs|-1.0|pairs = -1 is not a whole number" \
            "linear_per_token_layer|1e300|a cost out of range" "attention_per_pair_layer|1e-320|a cost out of range"; do
  IFS='|' read -r key value want <<< "$edit"
  sed "s/^$key = .*/$key = $value/" "$work/cal.txt" > "$work/crafted.txt"
  grep -q "^$key = $value\$" "$work/crafted.txt" || fail "the calibration has no line '$key = ...'"
  expect_error "$want" --ranks 2 --calibration "$work/crafted.txt"
done
# every layout and placement: pipeline ticks under CAD, CAD with context parallelism,
# pipeline x context parallelism; each prediction's timeline is valid trace-event JSON
# whose idle matches the predicted idle
for layout in "4 --attention.placement cad --parallel.pp 2 --train.micro_batches 4" \
              "4 --attention.placement cad --parallel.cp 2" \
              "8 --attention.placement cad --parallel.pp 2 --parallel.cp 2 --train.micro_batches 2" \
              "8 --parallel.pp 2 --parallel.cp 2 --train.micro_batches 4" \
              "4 --parallel.dp_balance packing"; do
  set -- $layout
  ranks=$1
  shift
  "$LCT" simulate $MODEL --ranks "$ranks" --steps 2 --calibration "$work/cal.txt" --json \
    --trace.path "$work/trace.json" "$@" > "$work/sim.json"
  /usr/bin/python3 "$(dirname "$0")/../check_trace.py" "$work/trace.json" "$work/sim.json" "$ranks"
  /usr/bin/python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print('     ', r['layout'], '|', r['placement'], '|', round(r['tokens_per_s']), 'tok/s | idle', round(100 * r['idle_fraction'], 1), '%')" "$work/sim.json"
done
# hosts (src/sim/network.h): the same calibration, so only the links change. dp = 2 on
# two hosts exposes the gradient all-reduce; dp 2 x cp 2 on two hosts keeps each
# context-parallel pair on one host, so its exchange is charged as on one host while the
# all-reduce crosses at the host link
one_host=$(sim --ranks 2 --bandwidth 0.05)
two_hosts=$(sim --ranks 2 --hosts 2 --host-bandwidth 0.05 --host-latency 60)
cp_one=$(sim --ranks 4 --parallel.cp 2 --bandwidth 0.05)
cp_two=$(sim --ranks 4 --parallel.cp 2 --bandwidth 0.05 --hosts 2 --host-bandwidth 0.01)
/usr/bin/python3 - "$one_host" "$two_hosts" "$cp_one" "$cp_two" <<'PY'
import json, sys
one, two, cp_one, cp_two = (json.loads(a) for a in sys.argv[1:])
assert one["hosts"] == 1 and two["hosts"] == 2 and two["host_bandwidth_gbps"] == 0.05, two
assert two["step_seconds"] > one["step_seconds"], (one, two)
assert cp_two["step_seconds"] > cp_one["step_seconds"], (cp_one, cp_two)
exposed = lambda r: r["exchange_exposed_fraction"] * r["step_seconds"]
assert exposed(cp_one) > 0 and abs(exposed(cp_two) - exposed(cp_one)) <= 1e-9 * exposed(cp_one), (cp_one, cp_two)
print(f"ok   simulate hosts: dp=2 {one['step_seconds']*1e3:.1f} ms on one host, {two['step_seconds']*1e3:.1f} ms "
      f"on two; dp 2 x cp 2 {cp_one['step_seconds']*1e3:.1f} -> {cp_two['step_seconds']*1e3:.1f} ms, "
      f"context-parallel exchange exposed {exposed(cp_one)*1e3:.2f} ms on both")
PY
# the papers' machine: analytic costs of a Llama-8B-shaped model at 990 TFLOP/s, no
# calibration and no model allocated (8B parameters would take 32 GB)
paper=$("$LCT" simulate --json --ranks 8 --steps 1 --tflops 990 --bandwidth 50 --model.hidden_size 4096 \
  --model.intermediate_size 14336 --model.num_hidden_layers 32 --model.num_attention_heads 32 \
  --model.num_key_value_heads 8 --model.vocab_size 128256 --data.seq_len 131072 --data.max_doc_len 131072)
/usr/bin/python3 - "$paper" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
# 6 x 7.5e9 matmul weights per token / 990e12 FLOP/s = 45 us per token and rank, so 8
# ranks do at most 8 / 45e-6 = 178K tokens/s (less: attention over 128K documents)
assert 2e4 < r["tokens_per_s"] < 1.78e5 and r["calibration"]["threads"] == 0, r
print(f"ok   paper constants: Llama-8B shape at 990 TFLOP/s, 8 ranks: {r['tokens_per_s']:.0f} tok/s, "
      f"idle {100 * r['idle_fraction']:.1f}%")
PY
echo "simulate: all passed"
