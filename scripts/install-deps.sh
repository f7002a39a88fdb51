#!/usr/bin/env bash
# Installs what dsrt needs to build and test from Debian's packages. Idempotent and quiet when
# everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  liburing-dev libcjson-dev swig libopenmpi-dev openmpi-bin libgtest-dev libopenblas-dev
  libgloo-dev
  python3-dev python3-venv python3-numpy python3-pytest python3-torch fio clang libclang-rt-14-dev
  cargo
  bindgen rustfmt python3-clang
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
