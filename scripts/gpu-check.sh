#!/usr/bin/env bash
# One-shot GPU check: pack a CUDA build made on a machine without a GPU, run it on a bare GPU
# machine (CUDA runtime and driver, NCCL from a Python wheel, no MPI, no network) in one go.
#
#   scripts/gpu-check.sh pack BUILD PACK   on the build machine: BUILD configured with CUDA
#                                           (sm_90 + PTX) and built; PACK a new folder (< 60 MiB)
#   PACK/gpu-check.sh run PACK [OUT]       on the GPU machine (this script, copied into PACK)
#
# run: every GPU test program, the multi-rank tests with 2 and 4 ranks through the packed Open MPI
# (all ranks on the one GPU, host-staged communicator), the GPU benchmarks and the demo, each with
# a timeout, the whole within DSRT_GPU_CHECK_BUDGET_S seconds (default 450). OUT (default $OUT,
# else PACK/out) receives summary.md (result and seconds per item), logs/ and the environment seen.
# Without a GPU the GPU programs skip themselves and the multi-rank tests run on the CPU device.
set -uo pipefail

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

# ---------------------------------------------------------------------------------------------
# pack

# Libraries a bare GPU machine has or must provide itself: the C library family, the driver,
# NCCL (the wheel's).
is_system_lib() {
  case "$(basename "$1")" in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
      libutil.so* | libcuda.so* | libnvidia-* | libnccl.so*) return 0 ;;
  esac
  return 1
}

# Libraries of network fabrics an Open MPI plugin may need; such plugins are left out (the check
# runs every rank on one machine over shared memory).
is_fabric_lib() {
  case "$(basename "$1")" in
    libuc[pst].so* | libucm.so* | libfabric.so* | librdmacm.so* | libpsm* | libjvm.so* | libjava.so* | \
      libcuda.so* | libnvidia-*) return 0 ;;
  esac
  return 1
}

# The resolved shared libraries of the given files (absolute paths, one per line).
deps_of() {
  ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u
}

pack() {
  local build=$1 pack_dir=$2
  [ -d "$build/bin" ] && [ -e "$build/lib/libdsrt.so" ] || { echo "gpu-check pack: $build has no bin/ and lib/libdsrt.so (build it first)"; exit 1; }
  if [ -z "$(find "$build" -name '*.cu.o' -print -quit 2>/dev/null)" ]; then
    echo "gpu-check pack: $build holds no compiled CUDA objects: configure it with nvcc found (DSRT_CUDA AUTO or ON)"
    exit 1
  fi
  command -v orterun >/dev/null && command -v orted >/dev/null && command -v ompi_info >/dev/null ||
    { echo "gpu-check pack: Open MPI's orterun, orted and ompi_info are needed on this machine"; exit 1; }
  [ -e "$pack_dir" ] && { echo "gpu-check pack: $pack_dir exists; give a new folder"; exit 1; }
  build=$(cd "$build" && pwd)
  local here
  here=$(cd "$(dirname "$0")/.." && pwd)
  mkdir -p "$pack_dir" || exit 1
  pack_dir=$(cd "$pack_dir" && pwd)
  stage=$(mktemp -d) || exit 1  # global: the exit trap removes it
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-fallback" "$stage/data" "$stage/bench"

  # Programs: every test and benchmark program, the dsrt command and the demo.
  local f
  for f in "$build"/bin/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    case "$(basename "$f")" in
      test_* | mpi_* | bench_cuda_* | dsrt | dsrt_gpt_demo) cp "$f" "$stage/bin/" ;;
    esac
  done
  cp -P "$build"/lib/libdsrt.so* "$stage/lib/"
  cp "$here/bench/torch_cuda_adamw.py" "$stage/bench/" 2>/dev/null
  cp "$here"/docs/*.md "$stage/data/"  # the demo's training text

  # Open MPI, relocated through OPAL_PREFIX: the same layout under ompi/ as under its prefix.
  local prefix libdir pkglibdir datadir rel_pkglib
  prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
  libdir=$(ompi_info --path libdir --parsable | sed -n 's/^path:libdir://p')
  pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
  datadir=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
  [ -n "$prefix" ] && [ -d "$pkglibdir" ] || { echo "gpu-check pack: ompi_info gave no prefix or plugin folder"; exit 1; }
  rel_pkglib=${pkglibdir#"$prefix"/}
  mkdir -p "$stage/ompi/bin" "$stage/ompi/$rel_pkglib" "$stage/ompi/${libdir#"$prefix"/}" \
    "$stage/ompi/${datadir#"$prefix"/}"
  cp "$(command -v orterun)" "$(command -v orted)" "$stage/ompi/bin/"
  cp -r "$datadir"/. "$stage/ompi/${datadir#"$prefix"/}/"
  local plugin dep ok plugins=()
  for plugin in "$pkglibdir"/*.so; do
    ok=1
    for dep in $(deps_of "$plugin"); do
      if is_fabric_lib "$dep"; then ok=0; break; fi
    done
    [ "$ok" = 1 ] && plugins+=("$plugin")
  done
  cp "${plugins[@]}" "$stage/ompi/$rel_pkglib/"
  # PMIx (external to Open MPI on some distributions): its plugins, found through PMIX_MCA_mca_base_component_path.
  local pmix_lib pmix_plugins=""
  pmix_lib=$(deps_of "$pkglibdir"/mca_pmix_*.so | grep '/libpmix\.so' | head -1)
  if [ -n "$pmix_lib" ]; then
    for f in "$(dirname "$pmix_lib")"/pmix "$(dirname "$(readlink -f "$pmix_lib")")"/pmix; do
      if [ -d "$f" ]; then pmix_plugins=$f; break; fi
    done
  fi
  if [ -n "$pmix_plugins" ]; then
    mkdir -p "$stage/pmix"
    cp "$pmix_plugins"/*.so "$stage/pmix/" 2>/dev/null
  fi

  # Shared libraries: everything the programs, libdsrt, Open MPI and the kept plugins load that a
  # bare machine may lack (C++ runtime included; the CUDA runtime only as a fallback).
  local lib
  for lib in $(deps_of "$stage"/bin/* "$stage"/lib/libdsrt.so "$stage"/ompi/bin/* "$stage/ompi/$rel_pkglib"/*.so \
    "$stage"/pmix/*.so); do
    is_system_lib "$lib" && continue
    case "$(basename "$lib")" in
      libdsrt.so*) continue ;;
      libcudart.so* | libcublas*.so*) cp -L "$lib" "$stage/lib-fallback/" ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  # Second level: what those libraries load in turn.
  for lib in $(deps_of "$stage"/lib/*.so*); do
    is_system_lib "$lib" && continue
    [ -e "$stage/lib/$(basename "$lib")" ] || [ -e "$stage/lib-fallback/$(basename "$lib")" ] || cp -L "$lib" "$stage/lib/"
  done

  {
    echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "binary_dir: $build"
    echo "ompi_prefix_layout: $rel_pkglib"
    echo "nvcc: $(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)"
    echo "cuda_code: $(grep -o 'generate-code=arch=[^ ]*' "$build/build.ninja" 2>/dev/null | sort -u | tr '\n' ' ')"
  } >"$pack_dir/manifest.txt"
  # The programs compress well: one xz archive, unpacked on the GPU machine.
  tar -C "$stage" -cf - bin lib lib-fallback data bench | xz -T2 -6 >"$pack_dir/payload.tar.xz" || exit 1
  tar -C "$stage" -cf - ompi $( [ -d "$stage/pmix" ] && echo pmix) | xz -T2 -6 >"$pack_dir/ompi.tar.xz" || exit 1
  cp "$0" "$pack_dir/gpu-check.sh"
  chmod +x "$pack_dir/gpu-check.sh"
  local size
  size=$(du -sk "$pack_dir" | cut -f1)
  echo "packed $pack_dir: $((size / 1024)) MiB ($(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries, ${#plugins[@]} Open MPI plugins)"
  if [ "$size" -gt $((60 * 1024)) ]; then
    echo "gpu-check pack: the pack is over 60 MiB"
    exit 1
  fi
}

# ---------------------------------------------------------------------------------------------
# run

# The single-process programs that run on "the current device" or need a GPU, in order of
# importance; then the multi-rank programs (2 and 4 ranks).
GPU_TESTS="test_cuda_kernels test_cuda_norm_order test_cuda_chunk_list test_cuda_onebit test_cuda_pool test_cuda_quantize test_engine_device
test_engine_device_backend test_engine_device_offload test_offload_param_device test_ckpt_device_states test_nccl_comm
test_ckpt_nvme"
# The ones that failed on the 2026-11-25 H200 run first.
MPI_FIRST="mpi_mics mpi_frozen mpi_comm_host_mpi mpi_comm_collectives mpi_offload_param mpi_offload_ckpt mpi_hpz"

find_lib_dir() {  # find_lib_dir NAME: a folder holding NAME (a shared library), or nothing
  local name=$1 d f
  for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 \
    /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [ -e "$d/$name" ] && { echo "$d"; return; }
  done
  local py
  for py in python3 python; do
    command -v "$py" >/dev/null || continue
    for d in $("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
      [ -d "$d/nvidia" ] || continue
      f=$(find "$d/nvidia" -name "$name" 2>/dev/null | head -1)
      [ -n "$f" ] && { dirname "$f"; return; }
    done
  done
  f=$(timeout 30 find / -xdev \( -path /proc -o -path /sys \) -prune -o -name "$name" -print 2>/dev/null | head -1)
  [ -n "$f" ] && dirname "$f"
}

run() {
  local pack_dir out
  pack_dir=$(cd "$1" && pwd) || exit 1
  out=${2:-${OUT:-$pack_dir/out}}
  mkdir -p "$out/logs" || exit 1
  out=$(cd "$out" && pwd)
  local budget=${DSRT_GPU_CHECK_BUDGET_S:-450}
  local start=$SECONDS
  local work
  work=$(mktemp -d -t dsrt-gpu-check.XXXXXX) || exit 1
  tar -C "$work" -xJf "$pack_dir/payload.tar.xz" || { echo "cannot unpack payload.tar.xz"; exit 1; }
  tar -C "$work" -xJf "$pack_dir/ompi.tar.xz" || { echo "cannot unpack ompi.tar.xz"; exit 1; }

  local cuda_lib nccl_lib cudart
  cudart=$(cd "$work/lib-fallback" && ls libcudart.so.* 2>/dev/null | head -1)
  cuda_lib=$(find_lib_dir "${cudart:-libcudart.so.13}")
  nccl_lib=$(find_lib_dir libnccl.so.2)
  export OPAL_PREFIX=$work/ompi
  export PATH=$work/ompi/bin:$work/bin:$PATH
  export LD_LIBRARY_PATH=$work/lib${cuda_lib:+:$cuda_lib}${nccl_lib:+:$nccl_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$work/lib-fallback
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_rmaps_base_oversubscribe=1
  [ -d "$work/pmix" ] && export PMIX_MCA_mca_base_component_path=$work/pmix
  export DSRT_COMM_TIMEOUT_S=${DSRT_COMM_TIMEOUT_S:-120} GTEST_COLOR=no
  local have_gpu=0
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && have_gpu=1
  # Tests that call the dsrt command find it under the build folder they were built in.
  local binary_dir
  binary_dir=$(sed -n 's/^binary_dir: //p' "$pack_dir/manifest.txt")
  if [ -n "$binary_dir" ] && [ ! -e "$binary_dir/bin/dsrt" ] && mkdir -p "$binary_dir/bin" 2>/dev/null; then
    ln -sf "$work/bin/dsrt" "$binary_dir/bin/dsrt"
  fi

  local summary=$out/summary.md
  {
    echo "# dsrt GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    sed 's/^/    pack /' "$pack_dir/manifest.txt"
    echo "    gpu $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo none)"
    echo "    cuda runtime $cuda_lib, nccl $nccl_lib, orterun $(command -v orterun), budget ${budget} s"
    echo
    echo "| item | result | seconds | note |"
    echo "| --- | --- | --- | --- |"
  } >"$summary"
  env | sort >"$out/environment.txt"
  local passed=0 failed=0 notrun=0

  # item NAME TIMEOUT COMMAND...: runs it with a timeout (clipped to what is left of the budget),
  # its output in logs/NAME.log, and a row in the summary.
  item() {
    local name=$1 limit=$2
    shift 2
    local left=$((budget - (SECONDS - start)))
    if [ "$left" -lt 10 ]; then
      echo "| $name | not run | 0 | budget spent |" >>"$summary"
      notrun=$((notrun + 1))
      return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local log=$out/logs/$name.log t0=$SECONDS rc
    timeout -k 5 "$limit" "$@" >"$log.raw" 2>&1
    rc=$?
    sed 's/\x1b\[[0-9;]*m//g' "$log.raw" >"$log" && rm -f "$log.raw"
    local took=$((SECONDS - t0)) result note
    local tests skipped
    # The first summary line (every rank of a multi-rank program prints its own).
    tests=$(grep -o '^\[  PASSED  \] [0-9]* test' "$log" | head -1 | awk '{print $4 + 0}')
    skipped=$(grep -o '^\[  SKIPPED \] [0-9]* test' "$log" | head -1 | awk '{print $4 + 0}')
    tests=${tests:-0} skipped=${skipped:-0}
    note="$tests passed"
    [ "$skipped" -gt 0 ] && note="$note, $skipped skipped"
    if [ "$rc" = 0 ]; then
      result=pass
      passed=$((passed + 1))
      grep -q 'no CUDA device' "$log" && note="$note (no CUDA device)"
    else
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result="timeout (${limit} s)"; else result="FAIL (rc $rc)"; fi
      failed=$((failed + 1))
      note="$note; $(grep -h '^\[  FAILED  \] [A-Za-z]' "$log" | sed 's/^\[  FAILED  \] //; s/ (.*//' | sort -u | head -4 | tr '\n' ' ')"
    fi
    echo "| $name | $result | $took | $note |" >>"$summary"
    echo "$name: $result ($took s)"
  }
  mpi_item() {  # mpi_item PROGRAM RANKS TIMEOUT
    item "$1_np$2" "$3" orterun --allow-run-as-root --oversubscribe --bind-to none -np "$2" \
      -x LD_LIBRARY_PATH -x PATH -x OPAL_PREFIX -x DSRT_COMM_TIMEOUT_S -x GTEST_COLOR "$work/bin/$1"
  }

  local t p
  for t in $GPU_TESTS; do
    [ -x "$work/bin/$t" ] && item "$t" 120 "$work/bin/$t"
  done
  for p in $MPI_FIRST; do
    [ -x "$work/bin/$p" ] && mpi_item "$p" 2 90
  done
  if [ -x "$work/bin/bench_cuda_copy" ]; then
    item bench_cuda_copy 60 "$work/bin/bench_cuda_copy" --sizes-mb 1,16,256,1024 --iters 10
  fi
  if [ -x "$work/bin/bench_cuda_adam" ]; then
    local torch_flat=0 torch_many=0 py
    py=$(command -v python3 || true)
    if [ -n "$py" ] && timeout 120 "$py" "$work/bench/torch_cuda_adamw.py" --params 100000000 --tensors 512 --iters 10 \
      >"$out/logs/torch_cuda_adamw.log" 2>&1; then
      torch_flat=$(sed -n 's/^RESULT torch_cuda_adamw layout=flat params_per_s=//p' "$out/logs/torch_cuda_adamw.log")
      torch_many=$(sed -n 's/^RESULT torch_cuda_adamw layout=many params_per_s=//p' "$out/logs/torch_cuda_adamw.log")
    fi
    item bench_cuda_adam 90 "$work/bin/bench_cuda_adam" --params 100000000 --tensors 512 --iters 10 \
      --torch-flat "${torch_flat:-0}" --torch-many "${torch_many:-0}"
  fi
  if [ "$have_gpu" = 1 ] && [ -x "$work/bin/dsrt_gpt_demo" ]; then  # on a CPU it takes minutes
    item dsrt_gpt_demo 90 "$work/bin/dsrt_gpt_demo" --data "$work/data" --steps 100 --eval-every 50
  fi
  # The other multi-rank programs, 2 ranks, then 4 ranks for all of them.
  for t in "$work"/bin/mpi_*; do
    p=$(basename "$t")
    case " $MPI_FIRST " in *" $p "*) continue ;; esac
    [ "$p" = mpi_tcp_vs_mpi ] && continue  # Gloo over TCP against MPI: a CPU comparison
    mpi_item "$p" 2 90
  done
  for t in "$work"/bin/mpi_*; do
    p=$(basename "$t")
    [ "$p" = mpi_tcp_vs_mpi ] && continue
    mpi_item "$p" 4 120
  done

  {
    echo
    echo "passed $passed, failed $failed, not run $notrun; $((SECONDS - start)) s in all. Logs: logs/."
  } >>"$summary"
  cat "$summary"
  rm -rf "$work"
  [ "$failed" = 0 ]
}

case "${1:-}" in
  pack) [ $# -eq 3 ] || usage; pack "$2" "$3" ;;
  run) [ $# -ge 2 ] && [ $# -le 3 ] || usage; run "$2" "${3:-}" ;;
  *) usage ;;
esac
