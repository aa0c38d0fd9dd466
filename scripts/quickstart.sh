#!/usr/bin/env bash
# README command 1: install what is missing, build, and train the default config.
# Extra arguments are passed to `lct train` (e.g. --train.steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# (a rerun starts over in runs/default: --checkpoint.overwrite; pass --train.resume auto
# to continue instead)
exec ./build/lct train --config configs/default.toml --checkpoint.overwrite true "$@"
