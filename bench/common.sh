# Shared by the bench/*_scaling.sh scripts (sourced after their option parsing, which
# sets CONFIG): the lct binary, MPI as root, a scratch folder removed on exit, and
# bench_train, one measured run.
LCT=${LCT:-build/lct}
[ -x "$LCT" ] || { echo "$(basename "$0"): no lct binary at $LCT (bash scripts/build.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# bench_train RANKS DIR ARGS...: lct train on CONFIG, one rank per core with one thread
# each, no checkpoints but the final one, into DIR (log in DIR.log, shown on failure)
bench_train() {
  local np=$1 dir=$2
  shift 2
  mpirun -np "$np" --bind-to core "$LCT" train --config "$CONFIG" --train.threads 1 \
    --checkpoint.every 0 --checkpoint.dir "$dir" "$@" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
}
