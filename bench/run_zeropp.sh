#!/bin/sh
# ZeRO++ variants against plain ZeRO-3: bytes on the wire per step and step time, at 2 and 4 ranks
# with nodes of 2 ranks (DSRT_RANKS_PER_NODE), bench/bench_zeropp.cpp.
# Usage: bench/run_zeropp.sh BUILD_DIR [PARAMS_MILLIONS] [STEPS]
set -e
build=${1:?usage: run_zeropp.sh BUILD_DIR [PARAMS_MILLIONS] [STEPS]}
millions=${2:-4}
steps=${3:-5}
bin="$build/bin/bench_zeropp"
if [ ! -x "$bin" ]; then
  echo "run_zeropp.sh: $bin not built (build the bench_zeropp target)" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "run_zeropp.sh: mpirun not found: skipped" >&2
  exit 0
fi
flags="--oversubscribe --bind-to none --mca btl self,vader -x DSRT_COMM=mpi -x DSRT_RANKS_PER_NODE=2"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
for ranks in 2 4; do
  echo "== bench_zeropp: $ranks ranks, ${millions}M parameters"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 mpirun $flags -np "$ranks" "$bin" "$millions" "$steps"
done
