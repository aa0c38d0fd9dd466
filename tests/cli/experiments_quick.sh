#!/usr/bin/env bash
# scripts/experiments/all.sh --quick: every experiment runs end to end on a tiny model
# and writes its CSV (with the documented columns), markdown table and PNG.
set -euo pipefail
LCT=$1
SRC=$2
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
# (a heartbeat every 0.2 s of an lct run: lines as each long run goes, issue 57)
LCT="$LCT" LCT_HEARTBEAT_S=0.2 bash "$SRC/scripts/experiments/all.sh" --quick --out "$work/results" > "$work/all.log" 2>&1 \
  || { cat "$work/all.log"; exit 1; }
beat='^[a-z_]+: run [0-9]+ \(lct [a-z-]+(, [0-9]+ ranks)?\) \| [0-9.]+ (s|min|h) in \| the experiment [0-9.]+ (s|min|h) in$'
[[ $(grep -cE "$beat" "$work/all.log") -ge 1 ]] || { cat "$work/all.log"; echo "FAIL: no experiment heartbeat line"; exit 1; }
echo "ok   experiment heartbeat: $(grep -cE "$beat" "$work/all.log") lines while lct runs went on"
out=$(LCT="$LCT" LCT_HEARTBEAT_S=-1 /usr/bin/python3 "$SRC/scripts/experiments/stragglers.py" --quick --out "$work/bad" 2>&1) \
  && { echo "FAIL: LCT_HEARTBEAT_S=-1 accepted"; exit 1; }
[[ $out == *"LCT_HEARTBEAT_S must be a number of seconds >= 0"* ]] || { echo "FAIL: LCT_HEARTBEAT_S=-1: $out"; exit 1; }
check() {  # experiment columns...
  local e=$1
  shift
  local header
  header=$(head -1 "$work/results/$e/$e.csv" | tr -d '\r')
  [ "$header" = "$(IFS=,; echo "$*")" ] || { echo "FAIL: $e.csv columns '$header'"; exit 1; }
  [ "$(wc -l < "$work/results/$e/$e.csv")" -ge 3 ] || { echo "FAIL: $e.csv has no rows"; exit 1; }
  head -c 8 "$work/results/$e/$e.png" | grep -q PNG || { echo "FAIL: no $e.png"; exit 1; }
  grep -q "^## " "$work/results/$e/$e.md" || { echo "FAIL: no $e.md"; exit 1; }
  echo "ok   $e: $(($(wc -l < "$work/results/$e/$e.csv") - 1)) rows, PNG and markdown"
}
check stragglers source placement ranks idle_percent compute_max_over_mean paper_idle_percent
check cad_ablations experiment source ranks tolerance pingpong pairs_after_max_over_mean \
  mib_exchanged_per_rank tokens_per_s idle_percent
check placements source mix ranks seq_len placement tokens_per_s speedup_over_colocated idle_percent
check memory placement ranks seq_len tokens_per_rank peak_activation_mib peak_rss_mib activation_vs_colocated
check recompute seq_len precision recompute estimate_gib fits peak_rss_gib estimate_over_peak step_s step_vs_none \
  stored_kib_per_token scratch_kib_per_token
check attention_kernel distribution kernel tokens documents fwd_gflops bwd_gflops fwd_vs_gemm bwd_vs_gemm \
  fwd_bwd_vs_gemm fwd_bwd_vs_fma gemm_gflops gemm_library dca_time_vs_causal
check masks part mask layout tokens pairs fwd_bwd_ms fwd_gflops bwd_gflops fwd_bwd_vs_gemm fwd_bwd_vs_fma gemm_gflops us_per_token \
  tokens_per_s speedup_over_one_rank speedup_spread compute_max_over_mean pairs_max_over_mean mib_sent_per_rank_step \
  vs_causal bound exchange_exposed_pct
grep -q "^kernel,sliding_window,one-doc,1024,63520," "$work/results/masks/masks.csv"  # the mask's pairs, not causal's
# the ring and the all-gather move at most (W + T/cp)/T of causal's bytes under a window
/usr/bin/python3 - "$work/results/masks/masks.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["part"].startswith("exchange")]
window = [r for r in rows if r["mask"] == "sliding_window" and "double_ring" not in r["layout"]]
assert len(window) == 2 and all(0 < float(r["vs_causal"]) <= float(r["bound"]) for r in window), window
print("ok   masks: a window's exchange within (W + T/cp)/T of causal's:", [(r["layout"], r["vs_causal"]) for r in window])
PY
check block_sparse part mask settings seed steps train_loss_last10 held_out_loss held_out_accuracy spread vs_causal \
  tokens pairs pairs_per_query fwd_bwd_ms fwd_gflops bwd_gflops fwd_bwd_vs_gemm gemm_gflops step_s vs_window_time \
  mib_per_rank_step max_mib_rank_step
grep -q "^kernel,block_sparse,one-doc,1024," "$work/results/masks/masks.csv" || { echo "FAIL: masks.csv has no block_sparse kernel row"; exit 1; }
grep -q "^quality (over seeds),block_sparse," "$work/results/block_sparse/block_sparse.csv" || { echo "FAIL: block_sparse.csv has no quality summary"; exit 1; }
grep -q "^bytes T 4096 cp 4 allgather,block_sparse k 3," "$work/results/block_sparse/block_sparse.csv" || { echo "FAIL: block_sparse.csv has no bytes rows"; exit 1; }
check dca_extrapolation task kernel train_len position_begin position_end context_over_train targets loss recall
check cp_methods source mix cp seq_len method tokens_per_s speedup_over_one_rank speedup_spread \
  mib_sent_per_rank_step exposed_percent memory_mib_per_rank error_vs_measured_percent limit
check passkey recipe seed task kernel length_factor length depth documents accuracy generated_accuracy digit_recall loss \
  train_steps train_retrieval formed_step
for recipe in causal dca_trained logn dca_logn; do  # every recipe trained, scored under its kernels
  grep -q "^$recipe,0,passkey,dca,2,512,0.5," "$work/results/passkey/passkey.csv" \
    || { echo "FAIL: passkey.csv has no $recipe row at 2 x L"; exit 1; }
  grep -q "^$recipe,0,passkey,causal,2,512,0.5," "$work/results/passkey/passkey.csv" \
    || { echo "FAIL: passkey.csv has no causal row of $recipe"; exit 1; }
done
grep -q "^| dca_logn | dca | " "$work/results/passkey/passkey.md" || { echo "FAIL: passkey.md has no summary"; exit 1; }
# the attention evidence: blocked float64 attention equals the reference's, and it follows
# a trained pass-key model's answer rows under DCA with its logit scaling
/usr/bin/python3 "$SRC/scripts/experiments/passkey_attention.py" --self-test
/usr/bin/python3 "$SRC/scripts/experiments/passkey_attention.py" --checkpoint "$(ls "$work"/results/passkey/seed0/logn/step_*.h5 | tail -1)" \
  --batch "$work/results/passkey/batches/passkey_512.h5" --documents 2 --kernel dca --dca-chunk-size 255 \
  --dca-local-size 32 --dca-mscale-original-length 256 --csv "$work/attention.csv" --label logn:dca > "$work/attention.log"
[ "$(head -1 "$work/attention.csv")" = "label,length,layer,head,key_line_share,top_other_weight,effective_keys,documents" ] \
  && [ "$(grep -c "^logn:dca,512," "$work/attention.csv")" -eq 4 ] || { echo "FAIL: passkey_attention"; cat "$work/attention.log"; exit 1; }
grep -q "ulysses,.*does not split over parallel.cp = 8" "$work/results/cp_methods/cp_methods.csv"
grep -q "!\[stragglers\]" "$work/results/README.md"
grep -q "simulated, paper constants" "$work/results/stragglers/stragglers.csv"
echo "experiments_quick: all passed"
