#!/usr/bin/env bash
# The current transformers and accelerate with torch 2.x: the Trainer script tests/hf/train_gpt2.py
# once on the real DeepSpeed and once on dsrt, losses compared step by step at ZeRO 2 and 3, and
# each run's Trainer checkpoint resumed by the other (scripts/hf_deepspeed_check.py). Not part of
# `make test`; the table is committed in docs/huggingface.md ("DeepSpeed checkpoints").
#
#   scripts/check-hf-deepspeed.sh [BUILD] [VENV]
#     VENV  an environment with torch 2.x and deepspeed 0.19.8 (default: $DSRT_DEEPSPEED_VENV, else
#           ${TMPDIR:-/tmp}/dsrt-deepspeed-0.19.8, as scripts/check-deepspeed.sh makes it); the newest
#           transformers that runs on its torch and accelerate are installed into it from PyPI
#   DSRT_HF_OUT  write the markdown table there too
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
# transformers 5 needs torch >= 2.6; DeepSpeed's reference environment keeps torch 2.5.1.
if ! "$venv/bin/python" -c 'import transformers, accelerate' 2>/dev/null; then
  "$venv/bin/pip" install -q "transformers<5" accelerate ||
    { echo "SKIP: transformers/accelerate could not be installed (offline?); nothing was checked" >&2; exit 0; }
fi
export DS_ACCELERATOR=cpu DSRT_BUILD_DIR=$build PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
"$venv/bin/python" "$repo/scripts/hf_deepspeed_check.py"
