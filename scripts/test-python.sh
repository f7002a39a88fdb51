#!/usr/bin/env bash
# The Python binding's suites: pytest (low-level API and the PyTorch front) with Debian's python3,
# a 2-rank mpirun run of the front, and an import check with any other Python 3.11 on PATH.
#   $1: the release build folder
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cd "$(dirname "$0")/.."
export DSRT_BUILD_DIR=$build
py=/usr/bin/python3

if [ ! -f "$build/python/dsrt/capi.py" ]; then
  echo "the Python binding was not built (SWIG or python3-dev missing?)" >&2
  exit 1
fi

$py -m pytest -q -p no:cacheprovider tests/python/test_python_binding.py tests/python/test_lifetime.py \
  tests/python/test_errors_and_threads.py tests/python/test_torch_front.py tests/python/test_auto_config.py \
  tests/python/test_zero3_front.py tests/python/test_deepspeed_compat.py tests/python/test_examples.py \
  tests/python/test_deepspeed_script.py tests/python/test_ckpt_interop.py tests/python/test_monitors.py \
  tests/python/test_deepspeed_module.py tests/python/test_misuse.py tests/python/test_param_groups.py \
  tests/python/test_groups_front.py tests/python/test_ds_checkpoint.py tests/python/test_offload_ratio_estimate.py \
  tests/python/test_deepspeed_parity_front.py tests/python/test_gpu_bench_overlap.py

mpi_flags=(--oversubscribe --bind-to none --mca btl self,vader)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
shared=$(mktemp -d)
trap 'rm -rf "$shared"' EXIT
mpirun "${mpi_flags[@]}" -np 2 -x DSRT_BUILD_DIR -x DSRT_LOG_LEVEL=error $py tests/python/mpi_torch_front.py "$shared"
# DeepSpeed checkpoints of 2 ranks loaded by 2 dsrt ranks (the front imports them).
ds_import=$(mktemp -d)
mpirun "${mpi_flags[@]}" -np 2 -x DSRT_BUILD_DIR -x DSRT_LOG_LEVEL=error $py tests/python/mpi_ds_import.py "$ds_import"
rm -rf "$ds_import"

# The low-level module needs neither numpy nor torch: check it under another 3.11 interpreter too.
other=$(command -v python3.11 || true)
for candidate in "$(command -v python3 || true)" "$other"; do
  [ -n "$candidate" ] || continue
  [ "$(readlink -f "$candidate")" = "$(readlink -f $py)" ] && continue
  version=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$version" = "$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ] || continue
  echo "import check with $candidate ($version)"
  PYTHONPATH=$build/python "$candidate" -c '
import dsrt
config = dsrt.Config({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"}})
with dsrt.Engine(config) as engine:
    engine.add_param("w", shape=(3,))
    engine.build()
    engine.tensors["w"].grad_ready()
    assert engine.step().boundary
try:
    dsrt.Config({"fp16": {"enabeld": True}})
    raise SystemExit("expected a ConfigError")
except dsrt.ConfigError as error:
    assert "fp16.enabeld" in error.message
print("ok:", dsrt.version())
'
done
