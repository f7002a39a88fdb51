#!/usr/bin/env bash
# Checkpoints between dsrt and the real DeepSpeed 0.19.8 (torch 2.x, CPU accelerator, gloo): for
# every committed DeepSpeed fixture, DeepSpeed continuing its own checkpoint against DeepSpeed
# continuing dsrt's export of it (`dsrt checkpoint import` then `export`), DeepSpeed's
# zero_to_fp32 on that export, and dsrt's front continuing DeepSpeed's checkpoint; then a
# checkpoint the front saved, exported and continued by DeepSpeed at 1 and 2 ranks
# (scripts/deepspeed_ckpt_check.py has the rows). Not part of `make test`; the table is committed
# in docs/huggingface.md ("DeepSpeed checkpoints").
#
#   scripts/check-deepspeed-checkpoints.sh [BUILD] [VENV]
#     BUILD  the release build folder (default: build)
#     VENV   an environment with torch 2.x and deepspeed 0.19.8 (default: $DSRT_DEEPSPEED_VENV, else
#            ${TMPDIR:-/tmp}/dsrt-deepspeed-0.19.8, as scripts/check-deepspeed.sh makes it)
#   DSRT_CKPT_CASES  a space-separated subset of the fixtures (default: all)
#   DSRT_CKPT_OUT    write the markdown table there too
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${2:-${DSRT_DEEPSPEED_VENV:-${TMPDIR:-/tmp}/dsrt-deepspeed-0.19.8}}
for target in dsrt_python dsrt_python_package dsrt_cli; do
  cmake --build "$build" --target "$target" >/dev/null
done
if ! DS_ACCELERATOR=cpu "$venv/bin/python" -c 'import torch, deepspeed' 2>/dev/null; then
  echo "SKIP: no torch + deepspeed in $venv (run scripts/check-deepspeed.sh once to make it); nothing was checked" >&2
  exit 0
fi
export DS_ACCELERATOR=cpu DSRT_BUILD_DIR=$build PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
"$venv/bin/python" "$repo/scripts/deepspeed_ckpt_check.py" table ${DSRT_CKPT_OUT:+--out "$DSRT_CKPT_OUT"}
