#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, CPU only) into ./build-fuzz and runs each
# for SECONDS seconds (default 60) from its committed seed corpus. New interesting inputs go to a
# scratch corpus, not into the repository. A crash stops with the input saved under
# build-fuzz/crashes/<target>/: commit it to tests/fuzz/regressions/<target>/ with the fix, and
# test_fuzz_regressions replays it in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
jobs="$(nproc)"

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
  -DTAPEGRAD_CUDA=OFF -DTAPEGRAD_FUZZ=ON -DTAPEGRAD_BUILD_TESTS=OFF -DTAPEGRAD_BUILD_EXAMPLES=OFF \
  -DTAPEGRAD_BUILD_BENCHMARKS=OFF -DTAPEGRAD_DISTRIBUTED=OFF >/dev/null
cmake --build build-fuzz --parallel "$jobs" --target fuzz_idx fuzz_safetensors fuzz_safetensors_many fuzz_parsers \
  fuzz_creation

declare -A corpus=([fuzz_idx]=idx [fuzz_safetensors]=safetensors [fuzz_safetensors_many]=safetensors_many
                   [fuzz_parsers]=parsers [fuzz_creation]=creation)
# One fuzzer per core at a time: each is single-threaded, so on a 2-core machine two run side by
# side and every target still gets its SECONDS of a core.
fuzz_one() {
  local target="$1" scratch="build-fuzz/scratch/$1" crashes="build-fuzz/crashes/$1"
  mkdir -p "$scratch" "$crashes"
  # 2 GiB RSS and 1 GiB per allocation: a loader that believes a header's sizes before checking
  # them against the file shows up as an out-of-memory crash.
  OMP_NUM_THREADS=1 "build-fuzz/tests/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 -artifact_prefix="$crashes/" \
    "$scratch" "tests/fuzz/corpus/${corpus[$target]}" 2>"build-fuzz/$target.log"
}
report() {
  local target="$1" result="$2"
  echo "== $target, ${seconds}s"
  if [ "$result" -ne 0 ]; then
    echo "$target: FAILED, input saved in build-fuzz/crashes/$target/"
    grep -E "ERROR|SUMMARY" "build-fuzz/$target.log" | head -n 5
  fi
  grep -E "^Done|stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/$target.log" || true
}

targets=(fuzz_idx fuzz_safetensors fuzz_safetensors_many fuzz_parsers fuzz_creation)
status=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for target in "${batch[@]}"; do
    fuzz_one "$target" &
    pids+=("$!")
  done
  for k in "${!batch[@]}"; do
    result=0
    wait "${pids[$k]}" || result=$?
    [ "$result" -eq 0 ] || status=1
    report "${batch[$k]}" "$result"
  done
done
exit "$status"
