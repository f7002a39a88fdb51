#!/bin/sh
# Reduce-scatter, all-gather and all-to-all throughput of dsrt's MPI communicator against MPI's own collectives
# on the same bytes (bench/bench_comm.cpp). Usage: bench/run_comm.sh BUILD_DIR [RANKS] [MAX_MB]
set -e
build=${1:?usage: run_comm.sh BUILD_DIR [RANKS] [MAX_MB]}
ranks=${2:-2}
max_mb=${3:-64}
bin="$build/bin/bench_comm"
if [ ! -x "$bin" ]; then
  echo "run_comm.sh: $bin not built (build the bench_comm target)" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "run_comm.sh: mpirun not found: skipped" >&2
  exit 0
fi
flags="--oversubscribe --bind-to none --mca btl self,vader"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
echo "== bench_comm: $ranks ranks, 1..$max_mb MB buckets"
# shellcheck disable=SC2086
mpirun $flags -np "$ranks" "$bin" "$max_mb"
