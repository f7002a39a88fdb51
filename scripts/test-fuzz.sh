#!/usr/bin/env bash
# Fuzzes, with libFuzzer (clang) under ASan+UBSan and for a bounded time each:
#   fuzz_config      the DeepSpeed config reader, from tests/fuzz/config_corpus (seed configs) and
#                    the bad-config corpus tests/configs/bad
#   fuzz_checkpoint  the offline checkpoint reader (dsrt zero-to-fp32, dsrt_checkpoint_open), from
#                    tests/fuzz/checkpoint_corpus (tests/ckpt/craft_checkpoints.py writes it)
# No input may crash, hang, leak or trip a sanitizer.
#   $1: the release build folder (unused: the targets are built here with clang)
#   DSRT_FUZZ_SECONDS: how long to fuzz each target (default 12)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seconds=${DSRT_FUZZ_SECONDS:-12}
clang=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clang" ]; then
  echo "test-fuzz: SKIPPED: clang++ is not installed (apt-get install clang libclang-rt-14-dev)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const char *, unsigned long) { return 0; }' > "$work/probe.cpp"
if ! "$clang" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" 2>/dev/null; then
  echo "test-fuzz: SKIPPED: $clang has no libFuzzer runtime (apt-get install libclang-rt-14-dev)"
  exit 0
fi
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$here/include" -I"$here/src" -I"$here")
common=("$here/src/util/status.cpp" "$here/src/util/log.cpp")
ckpt_util=("$here/src/util/aligned_buffer.cpp")
ckpt=(checkpoint_reader manifest shard_file shard_cache file_io crc32c safetensors_writer ckpt_tag)
ckpt_sources=()
for f in "${ckpt[@]}"; do ckpt_sources+=("$here/src/ckpt/$f.cpp"); done

build() {  # build NAME SOURCES... (in the background; the two targets compile at once)
  local name=$1; shift
  "$clang" "${flags[@]}" "$here/tests/fuzz/$name.cpp" "$@" "${common[@]}" -lpthread -lcjson -o "$work/$name" \
    > "$work/$name.build.log" 2>&1
}
echo "test-fuzz: building the fuzzers with $clang"
build fuzz_config "$here"/src/config/*.cpp & config_build=$!
build fuzz_checkpoint "${ckpt_sources[@]}" "${ckpt_util[@]}" & ckpt_build=$!
built=1
wait $config_build || { cat "$work/fuzz_config.build.log"; built=0; }
wait $ckpt_build || { cat "$work/fuzz_checkpoint.build.log"; built=0; }
[ $built -eq 1 ] || { echo "test-fuzz: FAILED to build"; exit 1; }

fuzz() {  # fuzz NAME DICT CORPUS_DIRS...
  local name=$1 dict=$2; shift 2
  mkdir -p "$work/$name.corpus"
  for dir in "$@"; do cp "$dir"/* "$work/$name.corpus/" 2>/dev/null; done
  echo "test-fuzz: $name for ${seconds}s from $(ls "$work/$name.corpus" | wc -l) seed inputs"
  local dict_flag=()
  [ -n "$dict" ] && dict_flag=(-dict="$dict")
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$work/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 "${dict_flag[@]}" \
    -artifact_prefix="$work/$name-" -print_final_stats=1 "$work/$name.corpus" > "$work/$name.log" 2>&1
  local status=$?
  tail -n 12 "$work/$name.log"
  if [ $status -ne 0 ]; then
    mkdir -p "$here/build-fuzz-artifacts"
    cp "$work/$name"-crash-* "$work/$name"-leak-* "$work/$name"-timeout-* "$here/build-fuzz-artifacts/" 2>/dev/null
    echo "test-fuzz: $name FAILED (inputs kept in build-fuzz-artifacts/)"
    return 1
  fi
}
failed=0
fuzz fuzz_config "$here/tests/fuzz/config.dict" "$here/tests/fuzz/config_corpus" "$here/tests/configs/bad" || failed=1
fuzz fuzz_checkpoint "" "$here/tests/fuzz/checkpoint_corpus" || failed=1
[ $failed -eq 0 ] || exit 1
echo "test-fuzz: passed"
