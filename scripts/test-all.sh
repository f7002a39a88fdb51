#!/usr/bin/env bash
# Runs every test suite dsrt has; exits non-zero if any fails. Called by `make test`.
#   $1: the release build folder (already built)   $2: the sanitizer build folder
set -uo pipefail
build=${1:-build}
asan_build=${2:-build-asan}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
jobs=$(nproc)
failed=()
passed=()

suite() {  # suite NAME COMMAND...
  local name=$1; shift
  echo "=== suite: $name"
  local start=$SECONDS
  if "$@"; then passed+=("$name"); echo "=== suite $name passed ($((SECONDS - start)) s)"
  else failed+=("$name"); echo "=== suite $name FAILED ($((SECONDS - start)) s)"; fi
}

# 1. Everything CTest knows in the release build: C++ unit tests, pure-C tests, multi-rank,
#    command-line and install tests.
suite ctest ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 900

# 2. The C/C++ tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
asan() {
  cmake -S . -B "$asan_build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDSRT_SANITIZE=ON -DDSRT_CUDA=OFF \
        -DDSRT_BUILD_BENCH=OFF -DDSRT_BUILD_PYTHON=OFF >/dev/null &&
  cmake --build "$asan_build" -j "$jobs" &&
  # intercept_tls_get_addr=0: LeakSanitizer's tracking of dynamic TLS read a garbage block (a
  # "DTLS" range of 0xccf-0x400001dd1 in a 4-rank MPI process) and its stop-the-world
  # tracer crashed on it at exit of every 4-rank run ("Tracer caught signal 11: addr=0xcd0 ...
  # LeakSanitizer has encountered a fatal error"), after the tests had passed. Without the
  # interception dynamic TLS blocks are not scanned as roots; the leak check itself stays on.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0:suppressions=$here/tests/asan.supp \
  LSAN_OPTIONS=suppressions=$here/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$asan_build" -j "$jobs" --output-on-failure --timeout 900 -LE "nosan"
}
suite asan+ubsan asan

# 3. Language suites, as they exist.
for script in scripts/test-*.sh; do
  [ "$script" = "scripts/test-all.sh" ] && continue
  [ -x "$script" ] || continue
  suite "$(basename "$script" .sh)" "$script" "$build"
done

echo
echo "suites passed: ${passed[*]:-none}"
echo "suites failed: ${failed[*]:-none}"
echo "suites: ${#passed[@]} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
