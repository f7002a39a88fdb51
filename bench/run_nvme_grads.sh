#!/bin/sh
# Stage-3 NVMe offload with the gradient partition on NVMe against it in host memory: peak RSS saved
# and iteration time ratio, in the same run on the same disk (bench/bench_nvme_grads.cpp).
# Usage: bench/run_nvme_grads.sh BUILD_DIR [FOLDER] [PARAMS_MILLIONS] [STEPS] [SUB_GROUP_MILLIONS]
set -e
build=${1:?usage: run_nvme_grads.sh BUILD_DIR [FOLDER] [PARAMS_MILLIONS] [STEPS] [SUB_GROUP_MILLIONS]}
folder=${2:-$build/nvme-grads-bench}
bin="$build/bin/bench_nvme_grads"
[ -x "$bin" ] || { echo "run_nvme_grads.sh: $bin not built" >&2; exit 1; }
mkdir -p "$folder"
"$bin" "$folder" "${3:-16}" "${4:-5}" "${5:-1}"
