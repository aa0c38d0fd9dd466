#!/usr/bin/env bash
# Checkpoints are never lost and outputs never destroy inputs (issue 14, findings 1-5):
#   1. disk full at each checkpoint of a run: exit 1 with one line naming the free
#      space, no crash, no file under a final name that fails to verify, every earlier
#      checkpoint still verifies (a small tmpfs as root, else RLIMIT_FSIZE);
#   2. rotation never deletes the checkpoint just written, nor files it cannot read;
#   3. a fresh run refuses a folder holding another run's checkpoints (untouched, metrics
#      not appended) unless --checkpoint.overwrite true;
#   4. --train.resume auto skips a newest checkpoint whose tensor checksum fails, saying
#      so, and resumes from the newest one that verifies;
#   5. eval outputs equal to an input (by file identity) are refused;
#   6. a run that died before its first checkpoint (run.toml and metrics, no checkpoint)
#      continues with --train.resume auto as the same run, afresh;
#   7. one writer per folder: a second run on a folder another run is writing is refused
#      at once, naming the holder's pid; temporaries a killed run left are removed;
#   8. a checkpoint rewritten by h5repack (same datasets, another layout) is read: inspect
#      passes it and a run resumes from it;
#   9. a machine cache entry that is not a regular file or holds rates that are not finite
#      and positive is ignored with one warning and measured again.
set -uo pipefail
LCT=$1
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
cleanup() {
  if mountpoint -q "$work/small" 2>/dev/null; then umount "$work/small"; fi
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
section=0
begin() { section=$failures; }
ok() { if [[ $failures -eq $section ]]; then echo "ok   $*"; fi; }  # only when the section had no failure
verifies() { "$LCT" inspect "$1" > /dev/null 2>&1; }
args=(--model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
      --data.seq_len 128 --train.threads 1 --train.warmup_steps 2)

# --- 1. disk full at each checkpoint -------------------------------------------------
"$LCT" train "${args[@]}" --train.steps 2 --checkpoint.dir sizing > /dev/null || fail "sizing run"
size_kib=$(( ($(stat -c %s sizing/step_00000002.h5) + 1023) / 1024 ))
limit_mode=""
mkdir small
if [[ $(id -u) -eq 0 && -z ${LCT_TEST_FSIZE:-} ]] && mount -t tmpfs -o size=64k tmpfs small 2>/dev/null; then
  umount small; limit_mode=tmpfs
else
  limit_mode=fsize
fi
# (RLIMIT_FSIZE limits each file, and every checkpoint has about the same size, so
# without root only the first checkpoint can be made to fail)
ks="0 1 2 3"
[[ $limit_mode == fsize ]] && ks="0"
for k in $ks; do
  begin
  # room for k checkpoints (plus metrics, run.toml, slack), not for the (k+1)-th
  room=$(( k * size_kib + size_kib / 2 + 16 ))
  rm -rf small/* 2>/dev/null
  if [[ $limit_mode == tmpfs ]]; then
    mount -t tmpfs -o size=${room}k tmpfs small || { fail "mount"; break; }
    dir=small/run
    "$LCT" train "${args[@]}" --train.steps 10 --checkpoint.every 2 --checkpoint.keep 10 \
      --checkpoint.dir "$dir" > "full_$k.log" 2>&1
    rc=$?
  else
    # without root: the file-size limit makes a checkpoint write fail with EFBIG
    dir=small/run
    (trap '' XFSZ; ulimit -f $(( k * size_kib + size_kib / 2 )); exec "$LCT" train "${args[@]}" \
      --train.steps 10 --checkpoint.every 2 --checkpoint.keep 10 --checkpoint.dir "$dir") \
      > "full_$k.log" 2>&1
    rc=$?
  fi
  [[ $rc -eq 1 ]] || fail "disk full before checkpoint $((k + 1)): exit $rc (want 1)"
  errors=$(grep -c "lct: error" "full_$k.log")
  [[ $errors -eq 1 ]] || fail "disk full: $errors error lines"
  grep -q "checkpoint of step $(( 2 * (k + 1) )) not written (earlier checkpoints are untouched)" "full_$k.log" \
    || { fail "disk full: no clear line for step $(( 2 * (k + 1) ))"; cat "full_$k.log"; }
  grep -q "free on" "full_$k.log" || fail "disk full: the line does not name the free space"
  n=0
  for f in "$dir"/step_*.h5; do
    [[ -e $f ]] || continue
    n=$((n + 1))
    verifies "$f" || fail "disk full: $f does not verify"
  done
  [[ $n -eq $k ]] || fail "disk full: $n checkpoints kept, want $k"
  ls "$dir"/*.lct-* > /dev/null 2>&1 && fail "disk full: a temporary file was left behind"
  ok "disk full ($limit_mode) at checkpoint $((k + 1)): exit 1, $(grep "lct: error" "full_$k.log" | sed 's/.*: No space/No space/;s/.*: File too large/File too large/'), $n earlier checkpoint(s) verify"
  if [[ $limit_mode == tmpfs ]]; then umount small; fi
done

# --- 1b. a full disk while metrics.jsonl grows (reliability round 3, cause 14) --------
if [[ $limit_mode == tmpfs ]]; then
  begin
  rm -rf small/* 2>/dev/null
  mount -t tmpfs -o size=16k tmpfs small || fail "mount"
  mkdir -p small/run
  head -c 4096 /dev/zero > small/filler  # of four pages: run.lock, run.toml and this leave metrics.jsonl one
  "$LCT" train "${args[@]}" --train.steps 100 --checkpoint.every 0 --checkpoint.dir small/run > metrics_full.log 2>&1
  rc=$?
  [[ $rc -eq 1 ]] || fail "metrics on a full disk: exit $rc (want 1)"
  grep -q "lct: error.*small/run/metrics.jsonl: writing failed: No space left on device (.* free on small/run)" metrics_full.log \
    || { fail "metrics on a full disk: no clear line"; cat metrics_full.log; }
  lines=$(wc -l < small/run/metrics.jsonl)
  /usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open('small/run/metrics.jsonl')]
assert [r['step'] for r in rows] == list(range(1, len(rows) + 1)), [r['step'] for r in rows]
assert open('small/run/metrics.jsonl').read().endswith('\\n')" \
    || fail "metrics on a full disk: metrics.jsonl holds a partial or missing line"
  (( lines >= 1 && lines < 100 )) || fail "metrics on a full disk: $lines lines"
  ok "metrics.jsonl on a full disk: exit 1 at the line that did not fit, $lines whole lines kept"
  umount small
fi

# --- 2. rotation keeps the checkpoint just written -----------------------------------
begin
"$LCT" train "${args[@]}" --train.steps 4 --checkpoint.every 2 --checkpoint.keep 2 --checkpoint.dir rot > /dev/null \
  || fail "rotation run"
head -c 4096 /dev/urandom > rot/step_00000099.h5  # a crashed run's leftover, newer by name
"$LCT" train "${args[@]}" --train.steps 8 --checkpoint.every 2 --checkpoint.keep 2 --checkpoint.dir rot \
  --train.resume auto > rot.log 2>&1 || { fail "rotation resume"; cat rot.log; }
[[ -f rot/step_00000008.h5 ]] && verifies rot/step_00000008.h5 || fail "rotation deleted the checkpoint just written"
[[ -f rot/step_00000006.h5 && ! -e rot/step_00000004.h5 && ! -e rot/step_00000002.h5 ]] \
  || fail "rotation kept the wrong files: $(ls rot)"
[[ -f rot/step_00000099.h5 ]] || fail "rotation deleted a file it cannot read"
grep -q "skipping rot/step_00000099.h5" rot.log || fail "resume did not say it skipped the unreadable file"
ok "rotation: keeps step 6 and the just-written step 8, leaves the unreadable step_00000099.h5"

# --- 3. a fresh run refuses another run's folder --------------------------------------
begin
"$LCT" train "${args[@]}" --train.steps 2 --checkpoint.dir owned > /dev/null || fail "owner run"
sum_before=$(md5sum owned/step_00000002.h5 owned/metrics.jsonl owned/run.toml)
err=$("$LCT" train "${args[@]}" --train.steps 3 --train.seed 7 --checkpoint.dir owned 2>&1 >/dev/null)
rc=$?
[[ $rc -eq 1 && $err == *"checkpoint.dir 'owned' already holds a run"*"--checkpoint.overwrite true"* ]] \
  || fail "fresh run into another run's folder: exit $rc, '$err'"
[[ "$(md5sum owned/step_00000002.h5 owned/metrics.jsonl owned/run.toml)" == "$sum_before" ]] \
  || fail "the refused run changed the folder"
"$LCT" train "${args[@]}" --train.steps 3 --train.seed 7 --checkpoint.dir owned --checkpoint.overwrite true \
  > over.log 2>&1 || fail "overwrite run"
[[ ! -e owned/step_00000002.h5 && -f owned/step_00000003.h5 && $(wc -l < owned/metrics.jsonl) -eq 3 ]] \
  || fail "overwrite: $(ls owned), $(wc -l < owned/metrics.jsonl) metrics lines"
grep -q "1 checkpoint(s) of the previous run removed" over.log || fail "overwrite did not say what it removed"
# an overwrite deletes only what the folder's run.toml says the previous run wrote
# (reliability round 3, cause 11): a file lct did not write, or another folder's run's
# checkpoint copied in, stops it before anything is deleted
"$LCT" train "${args[@]}" --train.steps 1 --checkpoint.dir elsewhere > /dev/null || fail "other run"
for foreign in step_00000009.h5 step_00000001.h5; do
  if [[ $foreign == step_00000009.h5 ]]; then echo "not a checkpoint" > owned/$foreign
  else cp elsewhere/step_00000001.h5 owned/$foreign; fi
  sum_before=$(md5sum owned/*.h5 owned/metrics.jsonl owned/run.toml)
  err=$("$LCT" train "${args[@]}" --train.steps 2 --train.seed 9 --checkpoint.dir owned --checkpoint.overwrite true 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 1 && $err == *"--checkpoint.overwrite would delete owned/$foreign, which no run recorded in this folder's run.toml wrote"* ]] \
    || fail "overwrite with a foreign $foreign: exit $rc, '$err'"
  [[ "$(md5sum owned/*.h5 owned/metrics.jsonl owned/run.toml)" == "$sum_before" ]] || fail "the refused overwrite changed the folder"
  rm owned/$foreign
done
ok "run folder: refused without --checkpoint.overwrite (files untouched), replaced with it; never deletes a file the folder's record does not name"

# --- 4. resume skips a newest checkpoint that does not verify ------------------------
begin
"$LCT" train "${args[@]}" --train.steps 4 --checkpoint.every 2 --checkpoint.keep 5 --checkpoint.dir bad > /dev/null \
  || fail "resume source run"
/usr/bin/python3 - <<'PY'
import h5py
with h5py.File("bad/step_00000004.h5", "r+") as f:  # one weight changed, checksums not
    d = f["params/model/norm/weight"]
    d[0] = d[0] + 1.0
PY
"$LCT" train "${args[@]}" --train.steps 6 --checkpoint.every 2 --checkpoint.keep 5 --checkpoint.dir bad \
  --train.resume auto > bad.log 2>&1 || { fail "resume past a corrupt checkpoint"; cat bad.log; }
grep -q "skipping bad/step_00000004.h5, it does not verify: .*checksum does not match (corrupt)" bad.log \
  || fail "resume did not name the skipped checkpoint and why"
grep -q "resumed at step 2\|resuming from bad/step_00000002.h5\|step     3/6" bad.log || fail "resume did not continue from step 2"
ok "resume auto: skipped the corrupt step 4, resumed from step 2"

# --- 5. outputs never alias inputs ----------------------------------------------------
begin
"$LCT" make-batch --data.seq_len 128 --out batch.h5 > /dev/null || fail "make-batch"
ckpt=owned/step_00000003.h5
cp "$ckpt" before.h5
ln -s "$ckpt" alias.h5
for case in "--grads-out $ckpt" "--per-position-out $ckpt" "--grads-out alias.h5" "--grads-out ./owned/../$ckpt" \
            "--per-position-out batch.h5" "--grads-out g.h5 --per-position-out ./g.h5" "--per-document-out $ckpt" \
            "--per-document-out batch.h5" "--per-position-out p.csv --per-document-out ./p.csv"; do
  err=$("$LCT" eval --checkpoint "$ckpt" --batch-file batch.h5 $case 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 1 && $err == *"same file"* ]] || fail "eval $case: exit $rc, '$err'"
done
cmp -s before.h5 "$ckpt" || fail "an aliased eval output changed the checkpoint"
err=$("$LCT" make-batch --data.source text --data.path batch.h5 --out batch.h5 2>&1 >/dev/null)
[[ $? -eq 1 && $err == *"same file as data.path"* ]] || fail "make-batch --out = data.path: '$err'"
ok "eval and make-batch refuse outputs that are their inputs (links and other spellings too)"

# an input folder's files are inputs (issue 54 cause 2: --grads-out hf/model.safetensors
# replaced the model being evaluated, train.init_from was not among train's inputs)
begin
"$LCT" export --checkpoint "$ckpt" --out hfdir > /dev/null || fail "export"
hf_before=$(md5sum hfdir/*)
for case in "--checkpoint hfdir --grads-out hfdir/model.safetensors" "--checkpoint hfdir --per-position-out hfdir/config.json" \
            "--checkpoint hfdir/model.safetensors --per-document-out hfdir/config.json" \
            "--checkpoint hfdir --grads-out ./hfdir/../hfdir/model.safetensors"; do
  err=$("$LCT" eval --batch-file batch.h5 $case 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 1 && $err == *"same file"* ]] || fail "eval $case: exit $rc, '$err'"
done
err=$("$LCT" export --checkpoint hfdir/model.safetensors --out hfdir 2>&1 >/dev/null)
[[ $? -eq 1 && $err == *"same file"* ]] || fail "export over its own input's files: '$err'"
err=$("$LCT" train "${args[@]}" --train.steps 1 --checkpoint.dir from_hf --train.init_from hfdir \
      --trace.path hfdir/model.safetensors 2>&1 >/dev/null)
[[ $? -eq 1 && $err == *"trace.path 'hfdir/model.safetensors' is the same file as train.init_from"* ]] \
  || fail "train --trace.path over train.init_from's weights: '$err'"
[[ "$(md5sum hfdir/*)" == "$hf_before" ]] || fail "a refused command changed the Hugging Face folder"
ok "an input folder's files are inputs: eval, export and train refuse to write over them"

# --- 6. resume auto before any checkpoint ---------------------------------------------
begin
"$LCT" train "${args[@]}" --train.steps 2 --checkpoint.dir died > /dev/null 2>&1 || fail "died: first run"
rm died/step_*.h5  # as if killed before its first checkpoint: run.toml and metrics stay
run_id=$(grep run_id died/run.toml)
"$LCT" train "${args[@]}" --train.steps 2 --checkpoint.dir died --train.resume auto > died.log 2>&1 \
  || { fail "resume auto on a run without checkpoints"; cat died.log; }
grep -q "holds run .* but no checkpoint yet; starting it afresh" died.log || fail "died: no message"
[[ $(grep run_id died/run.toml) == "$run_id" ]] || fail "died: the run's identity changed"
[[ -f died/step_00000002.h5 && $(wc -l < died/metrics.jsonl) -eq 2 ]] || fail "died: checkpoint or metrics"
ok "resume auto continues a run that died before its first checkpoint, as the same run"

# --- 7. one writer per folder --------------------------------------------------------
begin
"$LCT" train "${args[@]}" --train.steps 100000 --checkpoint.every 0 --checkpoint.dir busy > busy.log 2>&1 &
holder=$!
for _ in $(seq 200); do [[ -s busy/metrics.jsonl ]] && break; sleep 0.05; done
start=$(date +%s)
err=$("$LCT" train "${args[@]}" --train.steps 5 --checkpoint.dir busy --train.resume auto 2>&1 >/dev/null)
rc=$?
[[ $rc -eq 1 && $err == *"checkpoint.dir 'busy' is in use by another lct run (pid $holder on $(hostname))"* ]] \
  || fail "second writer: exit $rc, '$err'"
(( $(date +%s) - start < 10 )) || fail "second writer: not refused at once"
kill -9 $holder; wait $holder 2>/dev/null
echo partial > busy/step_00000007.h5.lct-Ab12Cd  # what a run killed mid-write leaves
echo mine > busy/step_00000007.h5.tmp              # a user's file lct never wrote
ln -s ../elsewhere busy/step_00000008.h5.lct-Xy34Zw  # a symlink is never a temporary
"$LCT" train "${args[@]}" --train.steps 2 --checkpoint.dir busy --checkpoint.overwrite true > busy2.log 2>&1 \
  || { fail "after the holder died"; cat busy2.log; }
grep -q "removed 1 temporary file(s) of an interrupted checkpoint write" busy2.log || fail "stale .tmp not reported"
[[ ! -e busy/step_00000007.h5.lct-Ab12Cd ]] || fail "stale temporary kept"
[[ $(cat busy/step_00000007.h5.tmp) == mine && -L busy/step_00000008.h5.lct-Xy34Zw ]] \
  || fail "a file lct did not write was removed as a stale temporary"
ok "a folder has one writer (a second run is refused naming the holder's pid); stale temporaries removed"

# --- 8. a checkpoint rewritten by standard tools --------------------------------------
begin
"$LCT" train "${args[@]}" --train.steps 2 --checkpoint.dir repack_src > /dev/null 2>&1 || fail "repack: train"
h5repack repack_src/step_00000002.h5 repacked.h5 || fail "h5repack"
"$LCT" inspect repacked.h5 > repacked.txt 2>&1 || { fail "inspect of an h5repack'd checkpoint"; cat repacked.txt; }
"$LCT" train "${args[@]}" --train.steps 3 --checkpoint.dir repack_resume --train.resume repacked.h5 \
  > repack_resume.log 2>&1 || { fail "resume from an h5repack'd checkpoint"; cat repack_resume.log; }
grep -q "resumed at step 2" repack_resume.log || fail "repack: not resumed at step 2"
ok "a checkpoint rewritten by h5repack is inspected and resumed (every dataset verified)"

# --- 9. machine caches are not trusted as written (issue 54 cause 10) ----------------
begin
export LCT_CACHE_DIR=$work/cache
cache_run() { "$LCT" train "${args[@]}" --train.steps 1 --checkpoint.dir cache_run --checkpoint.overwrite true 2>&1; }
cache_run > cache1.log || { cat cache1.log; fail "a run that fills the cache"; }
entry=$(ls "$LCT_CACHE_DIR"/fp32_gemm-*.toml 2>/dev/null | head -1)
if [[ -z $entry ]]; then
  fail "no fp32 GEMM cache entry written"
else
  printf 'library = "openblas"\nopenblas_gflops = nan\nonednn_gflops = -inf\n' > "$entry"
  out=$(cache_run) || fail "a run over non-finite cached rates: $out"
  [[ $out == *"the cache entry $entry holds no usable measurement"*"ignored, measured again"* && \
     $out == *"measured now"* && $out != *"nan GFLOP"* && $out != *"inf GFLOP"* ]] \
    || fail "non-finite cached rates were trusted: $out"
  rm -f "$entry" && ln -s "$(basename "$entry")" "$entry"  # a link to itself: a loop
  out=$(cache_run) || fail "a run over a symlink loop in the cache folder: $out"
  [[ $out == *"the cache entry $entry is not a regular file"* && $out != *"filesystem error"* ]] \
    || fail "a symlink loop in the cache folder: $out"
fi
unset LCT_CACHE_DIR
ok "machine caches: non-finite rates and a symlink loop are ignored with a warning and measured again"

if [[ $failures -ne 0 ]]; then echo "durability: $failures failures"; exit 1; fi
echo "durability: all passed"
