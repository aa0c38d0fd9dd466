# Shared by the bench/*.sh scripts (sourced first, after the scripts set their option
# defaults): the lct binary, MPI as root, a scratch folder removed on exit, the option
# parser, bench_train (ranks, one thread each) and bench_one (one process), one measured
# run.
LCT=${LCT:-build/lct}
[ -x "$LCT" ] || { echo "$(basename "$0"): no lct binary at $LCT (bash scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=PASSIVE
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# bench_options "NAME=DEFAULT ..." ARGS...: sets each option's upper-case variable (a
# NAME without =DEFAULT keeps the value the script set)
# (dashes become underscores: micro-batches=8 sets MICRO_BATCHES=8; CONFIG defaults to
# configs/default.toml), then reads the script's leading options --config and each
# --name with its value over them; stops at the first other argument and leaves the
# rest, the extra lct train arguments, in BENCH_REST.
bench_options() {
  local names="config" matched name entry
  CONFIG=${CONFIG:-configs/default.toml}
  for entry in $1; do
    name=${entry%%=*}
    names="$names $name"
    [ "$entry" = "$name" ] || printf -v "$(echo "$name" | tr 'a-z-' 'A-Z_')" '%s' "${entry#*=}"
  done
  shift
  while [ $# -gt 0 ]; do
    matched=""
    for name in $names; do
      if [ "$1" = "--$name" ]; then
        [ $# -ge 2 ] || { echo "$(basename "$0"): --$name needs a value" >&2; exit 1; }
        printf -v "$(echo "$name" | tr 'a-z-' 'A-Z_')" '%s' "$2"
        shift 2
        matched=1
        break
      fi
    done
    [ -n "$matched" ] || break
  done
  BENCH_REST=("$@")
}

# bench_train RANKS DIR ARGS...: lct train on CONFIG for STEPS steps, one rank per core
# with one thread each, no checkpoints but the final one, into DIR (log in DIR.log, shown
# on failure)
bench_train() {
  local np=$1 dir=$2
  shift 2
  mpirun -np "$np" --bind-to core "$LCT" train --config "$CONFIG" --train.threads 1 --train.steps "$STEPS" \
    --checkpoint.every 0 --checkpoint.dir "$dir" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
}

# bench_degree KEY RANKS DIR ARGS...: bench_train on RANKS ranks that all go to
# parallel.KEY (dp = 1)
bench_degree() { bench_train "$2" "$3" --parallel.dp 1 --parallel."$1" "$2" "${@:4}"; }

# bench_setting NAME KEY VALUE ARGS...: bench_one into $work/NAME for STEPS steps
# (RUN_STEPS when set) with lct train's --KEY VALUE
bench_setting() { bench_one "$work/$1" --train.steps "${RUN_STEPS:-$STEPS}" "--$2" "$3" "${@:4}"; }

# one_document_args LEN: sets ONE_DOCUMENT to the lct train arguments of one LEN-token
# document per sequence
one_document_args() {
  ONE_DOCUMENT=(--data.seq_len "$1" --data.doc_lengths fixed --data.max_doc_len "$1" --data.min_doc_len "$1")
}

# bench_one DIR ARGS...: lct train on CONFIG in one process (the config's threads: every
# core by default), no checkpoints but the final one, into DIR (log in DIR.log, shown on
# failure)
bench_one() {
  local dir=$1
  shift
  "$LCT" train --config "$CONFIG" --checkpoint.every 0 --checkpoint.dir "$dir" "$@" > "$dir.log" 2>&1 \
    || { cat "$dir.log"; exit 1; }
}
