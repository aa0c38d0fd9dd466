#!/usr/bin/env bash
# Timelines (trace.path): a dp = 2 CAD run (ping-pong) and a pp = 2 run write Chrome
# trace-event JSON that check_trace.py validates against the run's metrics (valid
# events, named ranks and tracks, no overlapping spans per track, idle from the trace
# equal to the logged idle); a path that cannot be written is refused before training;
# one process started without mpirun writes its timeline too (it used to call MPI before
# MPI was initialised and abort).
set -euo pipefail
LCT=$1
source "$(dirname "$0")/mpi_common.sh"  # MPIRUN, a scratch folder (current directory), helpers

MODEL="$(model_keys 32 48 2 4 2) --data.seq_len 256
  --data.max_doc_len 256 --train.threads 1"

run_train cad 2 --train.steps 6 --attention.placement cad --attention.cad_pingpong true \
  --train.micro_batches 2 --trace.path cad/trace.json
grep -q "timeline: cad/trace.json" cad.log
/usr/bin/python3 "$HERE/../check_trace.py" cad/trace.json cad/metrics.jsonl 2
grep -q '"CAD all-to-all"' cad/trace.json
run_train pp 2 --train.steps 6 --parallel.pp 2 --train.micro_batches 4 --trace.path pp/trace.json
/usr/bin/python3 "$HERE/../check_trace.py" pp/trace.json pp/metrics.jsonl 2
grep -q '"pipeline receive"' pp/trace.json
! ls pp/trace.json.lct-* > /dev/null 2>&1 || { echo "FAIL: temporary trace file left behind"; exit 1; }
run_train alone 0 --train.steps 3 --trace.path alone/trace.json
/usr/bin/python3 "$HERE/../check_trace.py" alone/trace.json alone/metrics.jsonl 1
expect_layout_error 2 "trace.path: cannot create the folder 'cad.log'" --trace.path cad.log/t.json
expect_layout_error 2 "trace.path '$PWD' is a folder" --trace.path "$PWD"
echo "mpi_trace: all passed"
