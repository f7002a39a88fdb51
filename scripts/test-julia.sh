#!/usr/bin/env bash
# The Julia bindings ($1: the release build folder). Their C layer (src/capi_gen.jl) is generated
# from include/dsrt.h and compared with it by ctest's bindings_generated test. No Julia runtime is
# available on this project's build machines, so this suite reads the hand-written module and
# tests against the generated layer (scripts/check-julia-calls.py: names, argument counts); where
# `julia` is on PATH, the package's own tests (test/runtests.jl) run too, against this build.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" "$here/scripts/check-julia-calls.py" "$here"
if command -v julia >/dev/null 2>&1; then
  echo "julia found: running Dsrt.jl's tests against $build"
  DSRT_DIR="$build" julia --project="$here/bindings/julia/Dsrt.jl" -e 'using Pkg; Pkg.test()'
else
  echo "julia not on PATH: Dsrt.jl's runtime tests (bindings/julia/Dsrt.jl/test/runtests.jl) not run"
fi
