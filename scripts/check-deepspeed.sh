#!/usr/bin/env bash
# dsrt against the real DeepSpeed: the same jobs trained by DeepSpeed 0.19.8 (DS_ACCELERATOR=cpu,
# gloo) and by dsrt's PyTorch front, each in its own processes, comparing the loss of every
# micro-step and the final fp32 masters (scripts/deepspeed_parity.py has the matrix and the
# tolerances). It also regenerates DeepSpeed's config schema and diffs it with the committed
# tests/data/deepspeed-schema.json, and checks that `dsrt config show` output is accepted by
# DeepSpeed's config reader. Not part of `make test`: PyPI's torch wheel pulls the CUDA runtime
# packages (GBs). The table is committed in docs/deepspeed-parity.md.
#
#   scripts/check-deepspeed.sh [BUILD] [VENV]
#     BUILD  the release build folder (default: build); the binding and the CLI are built there
#     VENV   the environment to create or reuse (default: $DSRT_DEEPSPEED_VENV, else
#            ${TMPDIR:-/tmp}/dsrt-deepspeed-0.19.8)
#   DSRT_TORCH_VERSION      torch to install (default 2.5.1)
#   DSRT_DEEPSPEED_VERSION  deepspeed to install (default 0.19.8, the version the defaults follow)
#   DSRT_PARITY_CASES       a space-separated subset of the cases (default: all)
#   DSRT_PARITY_OUT         write the markdown table there too
#   DSRT_PARITY_BENCH_WIDTH also print step times side by side (a bench, not a test) on an MLP of
#                           3 * WIDTH^2 parameters (1536: 7M; 2560: 20M; 4096: 50M); several
#                           widths separated by spaces run one after another
#   DSRT_PARITY_BENCH_RANKS the bench's rank counts (default: 1; e.g. "1 2")
#   DSRT_PARITY_BENCH_REPEAT runs per engine and case, alternating which goes first (default: 1)
# Exits 0 with a message, running nothing, when the packages cannot be fetched (no network).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
torch_version=${DSRT_TORCH_VERSION:-2.5.1}
ds_version=${DSRT_DEEPSPEED_VERSION:-0.19.8}
venv=${2:-${DSRT_DEEPSPEED_VENV:-${TMPDIR:-/tmp}/dsrt-deepspeed-$ds_version}}
python=${DSRT_PYTHON:-$(command -v python3)}

for target in dsrt_python dsrt_python_package dsrt_cli; do
  cmake --build "$build" --target "$target" >/dev/null
done
if [ ! -f "$build/python/dsrt/capi.py" ]; then
  echo "the Python binding was not built in $build (SWIG or the Python headers missing?)" >&2
  exit 1
fi

have_packages() {
  [ -x "$venv/bin/python" ] && DS_ACCELERATOR=cpu "$venv/bin/python" -c "
import sys, torch, deepspeed
sys.exit(torch.__version__.split('+')[0] != '$torch_version' or deepspeed.__version__ != '$ds_version')" 2>/dev/null
}
if ! have_packages; then
  "$python" -m venv "$venv"
  echo "installing torch $torch_version and deepspeed $ds_version into $venv (PyPI's torch pulls the CUDA runtime: GBs)"
  if ! "$venv/bin/pip" install -q --no-cache-dir "torch==$torch_version" numpy ||
     ! "$venv/bin/pip" install -q --no-cache-dir "deepspeed==$ds_version"; then
    echo "SKIP: torch $torch_version or deepspeed $ds_version could not be installed (offline?); nothing was checked" >&2
    exit 0
  fi
fi
export DS_ACCELERATOR=cpu
if ! dpkg -s libaio-dev >/dev/null 2>&1; then
  echo "note: libaio-dev is not installed; DeepSpeed cannot build its async_io op, so the NVMe row fails" \
       "(apt-get install libaio-dev)"
fi
"$venv/bin/python" -c 'import sys, torch, deepspeed; print("python", sys.version.split()[0], "torch", torch.__version__, "deepspeed", deepspeed.__version__)'
if ! PYTHONPATH=$build/python "$venv/bin/python" -c 'import dsrt' 2>/dev/null; then
  echo "the binding in $build does not import with $venv/bin/python: build it for this Python's minor version" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

echo "== DeepSpeed's config schema against tests/data/deepspeed-schema.json"
"$venv/bin/python" "$repo/scripts/dump-deepspeed-schema.py" > "$work/schema.json" 2>"$work/schema.err" || { cat "$work/schema.err" >&2; status=1; }
if diff -q "$repo/tests/data/deepspeed-schema.json" "$work/schema.json" >/dev/null; then
  echo "same"
else
  echo "DIFFERENT: regenerate tests/data/deepspeed-schema.json with scripts/dump-deepspeed-schema.py and update the table"
  status=1
fi

echo "== dsrt config show output read by DeepSpeed's config reader"
for seed in "$repo"/../shared/configs/seeds/*.json "$repo"/tests/configs/cli/*.json; do
  [ -f "$seed" ] || continue
  "$build/bin/dsrt" config show "$seed" --world-size 1 --hidden-size 64 >"$work/show.json" 2>/dev/null || continue
  # "auto" values are the host's to resolve before DeepSpeed sees them (the HF Trainer does).
  if grep -q '"auto"' "$work/show.json"; then
    echo "skipped (\"auto\" values left for the host): $(basename "$seed")"
    continue
  fi
  if ! "$venv/bin/python" - "$work/show.json" <<'EOF' 2>"$work/show.err"; then
import json, sys
from deepspeed.runtime.config import DeepSpeedConfig
with open(sys.argv[1]) as f:
    config = json.load(f)
DeepSpeedConfig(config)
EOF
    echo "refused by DeepSpeed: $(basename "$seed"): $(tail -1 "$work/show.err")"
    status=1
  else
    echo "accepted: $(basename "$seed")"
  fi
done

echo "== training: DeepSpeed and dsrt side by side"
cases=()
[ -n "${DSRT_PARITY_CASES:-}" ] && read -r -a cases <<<"$DSRT_PARITY_CASES"
out=()
[ -n "${DSRT_PARITY_OUT:-}" ] && out=(--out "$DSRT_PARITY_OUT")
PYTHONPATH=$build/python DSRT_BUILD_DIR=$build "$venv/bin/python" "$repo/scripts/deepspeed_parity.py" table \
  ${cases[@]+--cases "${cases[@]}"} "${out[@]}" || status=1

if [ -n "${DSRT_PARITY_BENCH_WIDTH:-}" ]; then
  echo "== step time side by side (bench)"
  read -r -a widths <<<"$DSRT_PARITY_BENCH_WIDTH"
  read -r -a bench_ranks <<<"${DSRT_PARITY_BENCH_RANKS:-1}"
  PYTHONPATH=$build/python DSRT_BUILD_DIR=$build "$venv/bin/python" "$repo/scripts/deepspeed_bench.py" \
    --width "${widths[@]}" --ranks "${bench_ranks[@]}" --repeat "${DSRT_PARITY_BENCH_REPEAT:-1}"
fi
exit $status
