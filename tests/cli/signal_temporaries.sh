#!/usr/bin/env bash
# issue 87: a SIGTERM or SIGINT while lct export or lct make-batch writes its output still
# ends the command by that signal (128 + N from the shell), leaves no temporary
# (<target>.lct-XXXXXX) and leaves the target as it was: absent, or the old file whole.
# The signal arrives while the temporary exists: the command is frozen (SIGSTOP) once its
# temporary appears, signalled, and let go (SIGCONT). (Before, only lct train handled a
# signal; the others died with their temporaries left, up to the whole output's size.)
set -euo pipefail
LCT=$1
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
source "$(dirname "$0")/signal_common.sh"     # signal_mid_write, no_temporaries (and nullglob)

# same_export A B: folders A and B hold the same export (its two files, nothing else)
same_export() {
  [[ $(cd "$1" && echo *) == "config.json model.safetensors" ]] &&
    cmp -s "$1/model.safetensors" "$2/model.safetensors" && cmp -s "$1/config.json" "$2/config.json"
}

# A model of 9.7M parameters: its fp32 model.safetensors is 39 MB (SGD: the checkpoint
# holds the weights alone, one training step of 64 tokens).
"$LCT" train $(model_keys 512 1024 4 4 2) --data.seq_len 64 --train.steps 1 --train.warmup_steps 0 \
  --train.optimizer sgd --train.threads 1 --checkpoint.dir ck > train.log 2>&1 || { cat train.log; fail "train"; }
ck=ck/step_00000001.h5
"$LCT" export --checkpoint $ck --out whole > /dev/null                # what a complete fp32 export writes
"$LCT" export --checkpoint $ck --out pristine --dtype bf16 > /dev/null  # the export an interrupted one must leave
same_export pristine whole && fail "the bf16 and fp32 exports are the same files"

# export_signalled SIG OUT FRESH: export into OUT (a fresh folder, or over a copy of
# pristine) with SIG during the write; a few tries when the export ended before its
# temporary was caught
export_signalled() {
  local sig=$1 out=$2 fresh=$3
  for _ in 1 2 3; do
    rm -rf "$out"
    [[ $fresh == fresh ]] || cp -r pristine "$out"
    signal_mid_write "$sig" "$out/*.lct-*" "export_$sig.log" "$LCT" export --checkpoint $ck --out "$out"
    [[ -n $caught ]] && return 0
  done
  fail "export: no temporary of $out caught in 3 runs (rc $rc)"
}

# SIGTERM while an export replaces an older one: the older export stays whole
export_signalled TERM over old
[[ $rc -eq 143 ]] || { cat export_TERM.log; fail "export: exit $rc after SIGTERM (want 143)"; }
no_temporaries "over/*.lct-*" "export after SIGTERM"
# (the complete new export only if the write won the race with the handler's thread)
same_export over pristine || same_export over whole || fail "export after SIGTERM: the folder is neither the old export nor the new one"
echo "ok   export: SIGTERM during the write of $(basename "$caught") -> exit 143, no temporary, the old export whole"

# SIGINT while an export writes a new folder: nothing under the output's names
export_signalled INT new fresh
[[ $rc -eq 130 ]] || { cat export_INT.log; fail "export: exit $rc after SIGINT (want 130)"; }
no_temporaries "new/*.lct-*" "export after SIGINT"
[[ ! -e new/model.safetensors && ! -e new/config.json ]] || same_export new whole ||
  fail "export after SIGINT: a partial export in new/"
echo "ok   export: SIGINT during the write of $(basename "$caught") -> exit 130, no temporary, no output file"

# lct make-batch of 256 x 16384 tokens: a 34 MB batch file (tokens and answer mask)
batch=(--data.seq_len 16384)
big=(--sequences 256)
"$LCT" make-batch "${batch[@]}" --sequences 1 --out pristine.h5 > /dev/null
# whole_batch F: F is a complete batch file of the big make-batch
whole_batch() { "$LCT" inspect "$1" 2> /dev/null | grep -q "^tokens $((256 * 16384)) "; }

# make_batch_signalled SIG OUT FRESH: as export_signalled, for make-batch --out OUT
make_batch_signalled() {
  local sig=$1 out=$2 fresh=$3
  for _ in 1 2 3; do
    rm -f "$out"
    [[ $fresh == fresh ]] || cp pristine.h5 "$out"
    signal_mid_write "$sig" "$out.lct-*" "make_batch_$sig.log" "$LCT" make-batch "${batch[@]}" "${big[@]}" --out "$out"
    [[ -n $caught ]] && return 0
  done
  fail "make-batch: no temporary of $out caught in 3 runs (rc $rc)"
}

make_batch_signalled INT over.h5 old
[[ $rc -eq 130 ]] || { cat make_batch_INT.log; fail "make-batch: exit $rc after SIGINT (want 130)"; }
no_temporaries "over.h5.lct-*" "make-batch after SIGINT"
cmp -s over.h5 pristine.h5 || whole_batch over.h5 || fail "make-batch after SIGINT: over.h5 is neither the old file nor a whole new one"
echo "ok   make-batch: SIGINT during the write of $(basename "$caught") -> exit 130, no temporary, the old file whole"

make_batch_signalled TERM new.h5 fresh
[[ $rc -eq 143 ]] || { cat make_batch_TERM.log; fail "make-batch: exit $rc after SIGTERM (want 143)"; }
no_temporaries "new.h5.lct-*" "make-batch after SIGTERM"
[[ ! -e new.h5 ]] || whole_batch new.h5 || fail "make-batch after SIGTERM: a partial new.h5"
echo "ok   make-batch: SIGTERM during the write of $(basename "$caught") -> exit 143, no temporary, no output file"
echo "signal_temporaries: all passed"
