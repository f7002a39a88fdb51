#!/usr/bin/env bash
# PACK/run.sh [bench options]: on a bare GPU machine (python3 with torch, a C compiler, no network),
# in a pack made by scripts/gpu-deepspeed-pack.sh: installs DeepSpeed and its missing dependencies
# from the pack's wheels into a folder of its own, compiles DeepSpeed's cpu_adam and async_io ops
# (against the pack's libaio) while dsrt's Python binding is compiled for this Python, then runs
# gpu_deepspeed_bench.py with the options given (default: every case, GPT-2 small, --profile).
# OUT (default PACK/out) receives bench.md, bench.md.json and logs.tar.gz (setup and every
# process's log). BENCH_BUDGET_S (default 185): the whole run's seconds; the bench starts no
# engine process that would end after it.
set -uo pipefail
pack=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$pack/out}
mkdir -p "$out/logs" || exit 1
py=${PYTHON:-python3}
budget=${BENCH_BUDGET_S:-185}
start=$SECONDS
work=$(mktemp -d -t dsrt-ds-bench.XXXXXX) || exit 1
note() { echo "[$((SECONDS - start)) s] $*"; }
finish() {
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"
  rm -rf "$work" "$pack/nvme-swap"
}
trap finish EXIT

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
"$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'

# DeepSpeed and the dependencies the machine lacks, ahead of the environment's own packages.
"$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" "$pack"/wheels/*.whl \
  >"$out/logs/pip.log" 2>&1 || { cat "$out/logs/pip.log"; exit 1; }
export PYTHONPATH=$work/site:$work/dsrt/python${PYTHONPATH:+:$PYTHONPATH}
note "wheels installed"

# libaio for DeepSpeed's async_io op (its compatibility probe reads CFLAGS/LDFLAGS, the compiler CPATH
# and LIBRARY_PATH).
aio_inc=$pack/libaio/usr/include
aio_lib=$(dirname "$(ls "$pack"/libaio/usr/lib/*/libaio.so.1 | head -1)")
export CPATH=$aio_inc${CPATH:+:$CPATH} LIBRARY_PATH=$aio_lib${LIBRARY_PATH:+:$LIBRARY_PATH}
export CFLAGS="-I$aio_inc" LDFLAGS="-L$aio_lib"
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$work/torch_extensions} MAX_JOBS=${MAX_JOBS:-$(nproc)}
export DS_BUILD_OPS=0
# DeepSpeed 0.19.8's JIT reads TORCH_CUDA_ARCH_LIST as plain major.minor numbers and fails on an entry
# such as "9.0a" (a ValueError before compiling): give it this GPU's capability (the ops built here,
# cpu_adam and async_io, are host code either way).
cc=$("$py" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability()) if torch.cuda.is_available() else None' 2>/dev/null)
[ -n "$cc" ] && [ "$cc" != None ] && export TORCH_CUDA_ARCH_LIST=$cc

# DeepSpeed's ops are compiled at first use: compile both now, in the background.
(timeout 150 "$py" -c 'from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(verbose=True)'
 echo "exit $?") >"$out/logs/jit_cpu_adam.log" 2>&1 &
jit_adam=$!
(timeout 150 "$py" -c 'from deepspeed.ops.op_builder import AsyncIOBuilder
b = AsyncIOBuilder()
print("async_io compatible:", b.is_compatible(verbose=True))
b.load(verbose=True)'
 echo "exit $?") >"$out/logs/jit_async_io.log" 2>&1 &
jit_aio=$!

# dsrt: the library and what it loads, and the Python binding compiled for this Python.
mkdir -p "$work/dsrt" && tar -C "$work/dsrt" -xJf "$pack/dsrt/lib.tar.xz" && cp -r "$pack/dsrt/python" "$work/dsrt/" || exit 1
nccl_dir=$(dirname "$("$py" -c 'import glob, site; print(next(iter(sorted(glob.glob(site.getsitepackages()[0] + "/nvidia/**/libnccl.so.2", recursive=True))), ""))')" 2>/dev/null)
export LD_LIBRARY_PATH=$work/dsrt/lib:$aio_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}${nccl_dir:+:$nccl_dir}:$work/dsrt/lib-fallback
py_inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
gcc -shared -fPIC -O1 -w -I"$py_inc" -I"$pack/dsrt/include" "$pack/dsrt/dsrt_capiPYTHON_wrap.c" \
  -L"$work/dsrt/lib" -ldsrt -o "$work/dsrt/python/dsrt/_capi.so" >"$out/logs/binding.log" 2>&1 ||
  { cat "$out/logs/binding.log"; exit 1; }
"$py" -c 'import torch, dsrt.deepspeed as d; print("dsrt", d.dsrt_version)' || exit 1
note "dsrt binding built"

wait $jit_adam $jit_aio
for op in cpu_adam async_io; do note "JIT $op: $(tail -1 "$out/logs/jit_$op.log")"; done

[ $# -gt 0 ] || set -- --profile
mkdir -p "$pack/nvme-swap"
PYTHONUNBUFFERED=1 "$py" "$pack/gpu_deepspeed_bench.py" --deadline-s $((budget - (SECONDS - start) - 5)) \
  --nvme-path "$pack/nvme-swap" --log-dir "$out/logs" --out "$out/bench.md" "$@"
rc=$?
note "done (bench exit $rc)"
exit $rc
