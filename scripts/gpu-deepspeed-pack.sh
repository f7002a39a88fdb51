#!/usr/bin/env bash
# Pack what scripts/gpu_deepspeed_bench.py needs on a bare GPU machine without network access
# (Python 3.12 with torch and transformers, a C compiler, no DeepSpeed, no libaio):
#
#   scripts/gpu-deepspeed-pack.sh BUILD PACK    on the build machine (network for pip and apt-get):
#                                               BUILD built with CUDA; PACK a new folder (~10 MiB)
#   PACK/run.sh [bench options]                 on the GPU machine: installs, builds, runs the bench
#
# PACK holds: wheels/ (DeepSpeed 0.19.8 built without its ops, which it then compiles at first use,
# and the cp312 wheels of its dependencies the GPU machine lacks), libaio/ (Debian's libaio1 and
# libaio-dev unpacked, for DeepSpeed's async_io op), dsrt/ (libdsrt and the libraries it loads that
# a bare machine may lack, dsrt's Python package, the SWIG wrapper source and dsrt.h: the binding
# is compiled there against that machine's Python), the bench and run.sh.
# DS_WHEEL_PYTHON (default python3): a Python with torch, setuptools and wheel to build the
# DeepSpeed wheel. PY_VERSION (default 3.12): the GPU machine's Python.
set -euo pipefail

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
[ $# -eq 2 ] || usage
build=$1 pack=$2
here=$(cd "$(dirname "$0")/.." && pwd)
py=${DS_WHEEL_PYTHON:-python3}
pyver=${PY_VERSION:-3.12}
wrap=$build/bindings/python/dsrt_capiPYTHON_wrap.c
[ -e "$build/lib/libdsrt.so" ] && [ -d "$build/python/dsrt" ] && [ -e "$wrap" ] ||
  { echo "gpu-deepspeed-pack: $build lacks lib/libdsrt.so, python/dsrt or $wrap (build it first)"; exit 1; }
[ -e "$pack" ] && { echo "gpu-deepspeed-pack: $pack exists; give a new folder"; exit 1; }
mkdir -p "$pack/wheels" "$pack/dsrt/lib" "$pack/dsrt/python" "$pack/dsrt/include"
pack=$(cd "$pack" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Wheels: DeepSpeed's dependencies missing on the GPU machine (one version each), then DeepSpeed.
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$pack/wheels" hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0
"$py" -m pip download -q --no-deps --no-binary :all: -d "$tmp" deepspeed==0.19.8
DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$pack/wheels" "$tmp"/deepspeed-0.19.8.tar.gz

# libaio (headers, library) for DeepSpeed's async_io op, unpacked from the distribution's packages.
(cd "$tmp" && apt-get download libaio1 libaio-dev >/dev/null)
for deb in "$tmp"/libaio*.deb; do dpkg-deb -x "$deb" "$pack/libaio"; done
rm -rf "$pack/libaio/usr/share" "$pack"/libaio/usr/lib/*/libaio.a

# libdsrt and the libraries it loads, less those every such machine has (the C library family, the
# driver, NCCL from torch's wheel, and the compiler runtimes: an older copy of libstdc++ ahead on
# LD_LIBRARY_PATH would break the extensions DeepSpeed compiles there).
is_system() {
  case "$(basename "$1")" in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | \
      libutil.so* | libcuda.so* | libnvidia-* | libnccl.so* | libstdc++.so* | libgcc_s.so* | libgomp.so* | \
      libz.so*) return 0 ;;
  esac
  return 1
}
cp -P "$build"/lib/libdsrt.so* "$pack/dsrt/lib/"
for level in 1 2; do
  for lib in $(ldd "$pack"/dsrt/lib/*.so* 2>/dev/null | awk '/=> \// {print $3}' | sort -u); do
    is_system "$lib" || [ -e "$pack/dsrt/lib/$(basename "$lib")" ] || cp -L "$lib" "$pack/dsrt/lib/"
  done
done
# The CUDA runtime only as a fallback, behind the machine's own (torch's, loaded first).
mkdir -p "$pack/dsrt/lib-fallback"
mv "$pack"/dsrt/lib/libcudart.so* "$pack/dsrt/lib-fallback/" 2>/dev/null || true
cp -r "$build/python/dsrt" "$pack/dsrt/python/"
rm -f "$pack"/dsrt/python/dsrt/_capi*.so
find "$pack/dsrt/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$wrap" "$pack/dsrt/"
cp "$here"/include/*.h "$pack/dsrt/include/"
(cd "$pack/dsrt" && tar -cf - lib lib-fallback | xz -T2 -6 >lib.tar.xz && rm -rf lib lib-fallback)

cp "$here/scripts/gpu_deepspeed_bench.py" "$pack/"
cp "$here/scripts/gpu-deepspeed-run.sh" "$pack/run.sh"
chmod +x "$pack/run.sh"
echo "commit: $(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)" >"$pack/manifest.txt"
ls "$pack/wheels" >>"$pack/manifest.txt"
echo "packed $pack: $(du -sh "$pack" | cut -f1)"
