#!/usr/bin/env bash
# The recipes in the headers of configs/*.toml run as written (with fewer steps): each
# "#   build/lct ..." line (with its "\" continuations) is run in order in a scratch
# folder, "build/lct" replaced by the binary under test and the n-th command's
# --train.steps by n (a step each), with a checkpoint every step, so a resume finds the
# previous command's checkpoint and trains one step past it.
set -euo pipefail
LCT=$1  # (made absolute by script_common.sh)
CONFIGS=$(realpath "$2")
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
failed=0
for cfg in "$CONFIGS"/*.toml; do
  mapfile -t cmds < <(python3 - "$cfg" <<'PY'
import re, sys
lines = [l[1:].strip() for l in open(sys.argv[1]) if l.startswith("#")]
cmd, out = "", []
for l in lines:
    if l.startswith("build/lct") or cmd:
        cmd += " " + l.rstrip("\\").strip()
        if not l.endswith("\\"):
            out.append(cmd.strip()); cmd = ""
for n, c in enumerate(out):
    c = re.sub(r"--train\.steps \d+", f"--train.steps {n + 1}", c)
    print(c if "--train.steps" in c else f"{c} --train.steps {n + 1}")
PY
)
  dir="$work/$(basename "$cfg" .toml)"
  mkdir -p "$dir"
  steps=0  # the previous command's --train.steps, which a resume continues from
  for c in "${cmds[@]}"; do
    c=${c/build\/lct/$LCT}
    c=${c//configs\//$CONFIGS/}
    echo "+ $c"
    (cd "$dir" && eval "$c" --checkpoint.every 1 > out.log 2>&1) || { echo "FAIL: $c"; tail -3 "$dir/out.log"; failed=1; }
    if [[ $c == *--train.resume* ]] && ! grep -q "resumed at step $steps " "$dir/out.log"; then
      echo "FAIL: $c did not resume the previous command's checkpoint (step $steps)"; failed=1
    fi
    [[ $c =~ --train\.steps\ ([0-9]+) ]] && steps=${BASH_REMATCH[1]}
  done
done
[ $failed -eq 0 ] && echo "PASS" || exit 1
