#!/usr/bin/env bash
# Pinned host<->device copy throughput of dsrt's CUDA device against cudaMemcpy on the same bytes,
# same run. $1: the build folder (configured with CUDA). DSRT_BENCH_SIZES_MB / DSRT_BENCH_ITERS
# override the sizes. Results are also written to bench/results/.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
bin="$build/bin/bench_cuda_copy"
[ -x "$bin" ] || { echo "missing $bin: build the bench_cuda_copy target"; exit 0; }
probe=$("$bin" --sizes-mb 1 --iters 1 2>&1 | head -1 || true)
case "$probe" in
  "CUDA not built"*|"no CUDA device"*) echo "bench_cuda_copy skipped: $probe"; exit 0 ;;
esac
mkdir -p "$here/bench/results"
out="$here/bench/results/cuda_copy_$(date -u +%Y%m%dT%H%M%SZ).txt"
"$bin" --sizes-mb "${DSRT_BENCH_SIZES_MB:-1,16,256,1024}" --iters "${DSRT_BENCH_ITERS:-20}" 2>&1 | tee "$out"
echo "written: $out"
