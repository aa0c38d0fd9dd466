#!/usr/bin/env bash
# Context-parallel scaling on this machine, one rank per core, in one script run:
# tokens/s of one rank against cp = N (N ranks, 1 thread each) with each exchange that
# cp = N allows (ring, all-gather, Ulysses; from N = 4 on also the hybrid N/2 x 2 and
# the double ring 2 x N/2: at N = 2 they would be Ulysses and the ring themselves), on
# sequences that are one document of --length tokens (the case context parallelism
# exists for). The layouts alternate for --rounds rounds;
# each round's speedup is the ratio of adjacent runs' wall-clock throughput (total tokens
# over total time of the steps after the first), and the figure is the median over rounds. Also reported, from lct's metrics:
# the exposed and hidden fraction of the step spent in the exchange, bytes sent per
# rank, and each layout's peak resident memory per rank (largest rank) against one
# rank's. Then the attention-pair imbalance of the zigzag and contiguous splits on the
# `pretrain` mix at cp = 2, 4, 8 (lct bench --sections cp_balance; no timing).
#
#   bash bench/cp_scaling.sh [--config configs/default.toml] [--length 16384] [--steps 4]
#                            [--rounds 3] [--ranks N] [extra lct train args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh  # LCT, MPI as root, $work, bench_options, bench_degree
bench_options "length=16384 steps=4 rounds=3 ranks=$(nproc)" "$@"
set -- "${BENCH_REST[@]}"

one_document_args "$LENGTH"
run() { bench_degree cp "$1" "$2" "${ONE_DOCUMENT[@]}" --train.micro_batches 1 "${@:3}"; }  # ranks dir [args]

echo "cp scaling | config $CONFIG | one document of $LENGTH tokens per step | $ROUNDS rounds x $STEPS steps | one rank per core, 1 thread each"
METHODS="ring allgather ulysses"
[ "$RANKS" -ge 4 ] && METHODS="$METHODS hybrid double_ring"
for r in $(seq "$ROUNDS"); do
  run 1 "$work/r${r}_one" "$@"
  for m in $METHODS; do
    run "$RANKS" "$work/r${r}_$m" --parallel.cp_comm "$m" --parallel.cp_ulysses $((RANKS / 2)) \
      --parallel.cp_inner_ring 2 "$@"
  done
done
grep -m1 "lct train |" "$work/r1_one.log"
grep -m1 "context parallel:" "$work/r1_ring.log"
PYTHONPATH=bench python3 - "$work" "$ROUNDS" "$RANKS" $METHODS <<'PY'
import statistics, sys
from throughput import load, wall_clock
work, rounds, n, methods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
med = statistics.median
tps = lambda d: wall_clock(load(d), warmup=1)["tokens_per_s"]  # total tokens / total time, steps 2..
print("  throughput = total tokens / total wall-clock time of steps 2.. of each run")
print(f"  {'round':>5} {'one tok/s':>10} " + " ".join(f"{m:>11} {'speedup':>8}" for m in methods))
sp = {m: [] for m in methods}
for r in range(1, rounds + 1):
    one = tps(f"{work}/r{r}_one")
    row = [f"{r:>7} {one:>10.0f}"]
    for m in methods:
        t = tps(f"{work}/r{r}_{m}")
        sp[m].append(t / one)
        row.append(f"{t:>11.0f} {t / one:>7.2f}x")
    print(" ".join(row))
one_rss = max(x["peak_rss_bytes"] for r in range(1, rounds + 1) for x in load(f"{work}/r{r}_one"))
for m in methods:
    xs = [x for r in range(1, rounds + 1) for x in load(f"{work}/r{r}_{m}")[1:]]
    rss = max(x["peak_rss_bytes"] for r in range(1, rounds + 1) for x in load(f"{work}/r{r}_{m}"))
    print(f"  cp={n} {m:>11}: speedup {med(sp[m]):.2f}x (rounds {min(sp[m]):.2f}-{max(sp[m]):.2f}) | exchange exposed "
          f"{100 * med(x['exchange_exposed_fraction'] for x in xs):.1f}% hidden "
          f"{100 * med(x['exchange_hidden_fraction'] for x in xs):.1f}% of the step | "
          f"{med(x['exchange_bytes_sent'] for x in xs) / 2**20:.1f} MiB sent per rank and step | "
          f"peak RSS per rank {rss / 2**20:.0f} MiB = {rss / one_rss:.2f}x one rank ({one_rss / 2**20:.0f} MiB)")
PY
"$LCT" bench --config "$CONFIG" --sections cp_balance --cp-degrees 2,4,8 --data.doc_lengths pretrain \
  | sed -n '/cp_balance/,$p'
