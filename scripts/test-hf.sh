#!/usr/bin/env bash
# The Hugging Face way in: the Trainer with `--deepspeed ds_config.json` on dsrt (through the
# pip-installed `deepspeed` stand-in and through `import dsrt.compat`), against the same script on
# plain PyTorch (tests/hf). Runs in a virtual environment over Debian's python3 and torch
# (--system-site-packages) with transformers and accelerate from PyPI, pinned to the releases the
# project's documents describe; the environment is kept in the build folder and reused.
# Without PyPI (and no environment from an earlier run) the suite is skipped with a message.
# Also here: the tensorboard monitor with the real tensorboard package.
#   $1: the release build folder
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$build/hf-venv
py=/usr/bin/python3
# transformers 4.37 and the accelerate of its time, with the hub and tokenizer releases they were made with.
pins=(transformers==4.37.2 accelerate==0.26.1 huggingface_hub==0.20.3 tokenizers==0.15.2 safetensors==0.4.2
      tensorboard==2.15.2)
stamp="$venv/.dsrt-pins"

if [ ! -f "$build/python/dsrt/capi.py" ]; then
  echo "the Python binding was not built (SWIG or python3-dev missing?)" >&2
  exit 1
fi
if ! $py -c 'import torch' 2>/dev/null; then
  echo "test-hf: skipped: Debian's python3 has no torch (install python3-torch: make deps)"
  exit 0
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${pins[*]}" ]; then
  rm -rf "$venv"
  $py -m venv --system-site-packages "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check --timeout 30 "${pins[@]}"; then
    rm -rf "$venv"
    echo "test-hf: skipped: PyPI is not reachable, so transformers and accelerate cannot be installed"
    exit 0
  fi
  echo "${pins[*]}" > "$stamp"
fi
cd "$repo"
export DSRT_BUILD_DIR=$build

# The stand-in refuses to install over a real DeepSpeed: DeepSpeed 0.13.1 itself (its source release,
# installed without its compiled ops) in a fresh environment, then the stand-in on top of it.
real=$(mktemp -d)
trap 'rm -rf "$real"' EXIT
$py -m venv --system-site-packages "$real/venv"
if DS_BUILD_OPS=0 "$real/venv/bin/pip" install -q --disable-pip-version-check --timeout 30 --no-deps \
     --no-build-isolation deepspeed==0.13.1 >"$real/ds.log" 2>&1; then
  cp -r "$repo/bindings/python" "$real/src"  # pip writes its egg-info beside the setup.py it runs
  if "$real/venv/bin/pip" install --no-build-isolation "$real/src/deepspeed_compat" >"$real/log" 2>&1; then
    echo "test-hf: FAIL: the deepspeed stand-in installed over a real DeepSpeed"; exit 1
  fi
  grep -q "refusing to install dsrt's deepspeed stand-in: a real DeepSpeed 0.13.1 is installed" "$real/log" ||
    { echo "test-hf: FAIL: the stand-in did not say why it refused:"; cat "$real/log"; exit 1; }
  [ "$("$real/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("deepspeed"))')" = 0.13.1 ] ||
    { echo "test-hf: FAIL: the real DeepSpeed was changed"; exit 1; }
  echo "test-hf: the stand-in refused to replace DeepSpeed 0.13.1, and said so"
else
  echo "test-hf: the refusal check is skipped: DeepSpeed 0.13.1 could not be installed:"; tail -3 "$real/ds.log"
fi

"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/hf/test_hf_trainer.py tests/hf/test_tensorboard.py
