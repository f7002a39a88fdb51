#!/usr/bin/env bash
# `pip install ./bindings/python` against an installed libdsrt, in a fresh virtual environment of
# the first python3 on PATH (not necessarily Debian's; DSRT_PYTHON picks another), then a training
# step through it.
#   $1: the release build folder
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
python=${DSRT_PYTHON:-$(command -v python3)}
# pip builds with the setuptools (and, before setuptools 70.1, wheel) it finds, without the package
# index (--no-build-isolation), when they are there: in the fresh environment, or in the
# interpreter's own site-packages (then the environment sees them). Otherwise pip fetches its build
# backend from the index, as for any sdist, which needs the network.
has_build_tools() {
  "$1" - <<'PY' 2>/dev/null
import importlib.util, setuptools
major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
assert (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None
PY
}
isolation=()
"$python" -m venv "$work/venv"
if has_build_tools "$work/venv/bin/python"; then
  isolation=(--no-build-isolation)
elif has_build_tools "$python"; then
  rm -rf "$work/venv"
  "$python" -m venv --system-site-packages "$work/venv"
  isolation=(--no-build-isolation)
else
  echo "no setuptools/wheel for $python: pip fetches them from the package index" >&2
fi
cp -r "$repo/bindings/python" "$work/src"
rm -f "$work/src/dsrt/capi.py"
DSRT_PREFIX="$work/prefix" "$work/venv/bin/pip" install -q "${isolation[@]}" "$work/src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import dsrt
assert dsrt.__file__.startswith(__import__("sys").prefix), dsrt.__file__
config = dsrt.Config({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}})
with dsrt.Engine(config) as engine:
    w = engine.add_param("w", shape=(3,))
    engine.build()
    with w as view:
        assert memoryview(view).format == "f" and memoryview(view).shape == (3,)
    w.grad_ready()
    result = engine.step()
    assert result.boundary and result.global_step == 1
try:
    dsrt.Config({"zero_optimization": {"stage": 9}})
    raise SystemExit("expected ConfigError")
except dsrt.ConfigError as error:
    assert "zero_optimization.stage" in error.message
print("pip-installed dsrt", dsrt.version(), "works with", __import__("sys").version.split()[0])
PY
# dsrt's `deepspeed` stand-in beside it: the distribution the HF libraries look for.
"$work/venv/bin/pip" install -q "${isolation[@]}" "$work/src/deepspeed_compat"
"$work/venv/bin/python" - <<'PY'
import importlib.metadata, importlib.util
version = importlib.metadata.version("deepspeed")
assert version.startswith("0.13.1+dsrt."), version
try:
    import torch  # noqa: F401
except ImportError:
    print("deepspeed stand-in", version, "installed (no torch here: not imported)")
else:
    import deepspeed
    import dsrt.torch_front
    assert deepspeed.DeepSpeedEngine is dsrt.torch_front.DsrtEngine and deepspeed.__version__ == version
    print("deepspeed stand-in", version, "imports as dsrt")
PY
