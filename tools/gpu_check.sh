#!/usr/bin/env bash
# The one-shot GPU check: on a lent GPU machine (nvcc, cmake, ninja, g++, PyTorch; no internet) it
# prints what the machine has, builds tapegrad with CUDA for sm_90 against the dependencies that
# tools/gpu_prepare.sh carried in gpu_bundle/, runs the whole ctest suite, compute-sanitizer over the
# CUDA test binaries, the examples on the GPU, and the benchmarks (plus the GPU-vs-CPU sweep and the
# PyTorch comparison when they exist), inside one time budget. Every stage has its own timeout and
# reports instead of aborting; $OUT/summary.md is rewritten after every stage. Without a GPU (or with
# --dry-run) the GPU stages are skipped with a message and the examples run briefly on the CPU, so
# the script can be tried anywhere. See docs/gpu.md.
#
# Usage: [OUT=dir] bash tools/gpu_check.sh [--dry-run] [--budget SECONDS] [--jobs N]
#          [--build-dir DIR] [--skip-build] [--cuda auto|on|off] [--only STAGE,...]
# Stages, in order: info deps configure build ctest examples bench sanitizer.
# Environment: SANITIZER_GTEST_FILTER (a --gtest_filter for the sanitizer runs), BENCH_MIN_TIME
# (seconds, default 0.05), GPU_CHECK_WORK (scratch folder, default /tmp/tapegrad_gpu_check).
set -uo pipefail  # not -e: a failing stage is reported, and the next one still runs
cd "$(dirname "$0")/.." || exit 2
ROOT="$PWD"
START=$(date +%s)

BUDGET=450
JOBS=$(nproc)
BUILD="$ROOT/build-gpu"
DRY=0
SKIP_BUILD=0
CUDA_MODE=""
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --budget) BUDGET="$2"; shift ;;
    --jobs) JOBS="$2"; shift ;;
    --build-dir) BUILD="$(cd "$ROOT" && realpath -m "$2")"; shift ;;
    --skip-build) SKIP_BUILD=1 ;;
    --cuda) CUDA_MODE="$(echo "$2" | tr '[:lower:]' '[:upper:]')"; shift ;;
    --only) ONLY=",$2,"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
DEADLINE=$((START + BUDGET))
# No file written by anything below may pass 4 GiB: a runaway writer must not fill the disk.
ulimit -f $((4 * 1024 * 1024)) 2>/dev/null
CAP_SCALE=1
RESERVE=15  # seconds kept back for packing the results

OUT="${OUT:-$ROOT/out/gpu_check}"
WORK="${GPU_CHECK_WORK:-/tmp/tapegrad_gpu_check}"
mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK/sections" "$WORK/bench" "$WORK/sweep" "$WORK/compare" "$WORK/bin" "$WORK/libs"
BUNDLE="$ROOT/gpu_bundle"
PREFIX="$WORK/prefix"
ORIGINAL_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"

# ---- bookkeeping -----------------------------------------------------------------------------------
HAVE_GPU=0
NO_GPU_REASON=""
STAGES=() STATUS=() DETAIL=() SECS=()
FAILED_STAGES=0
now() { date +%s; }
left() { echo $((DEADLINE - $(now))); }
want() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }
say() { echo "[gpu_check $(($(now) - START))s] $*"; }

# record NAME STATUS DETAIL SECONDS: one row of the stage table; rewrites summary.md.
record() {
  STAGES+=("$1"); STATUS+=("$2"); DETAIL+=("${3//|//}"); SECS+=("$4")
  case "$2" in FAIL|TIMEOUT) FAILED_STAGES=$((FAILED_STAGES + 1)) ;; esac
  say "$1: $2 ${3:+($3)} in ${4}s"
  write_summary
}

# A stage's timeout: its cap, or what the budget leaves (minus the reserve, and minus KEEP seconds
# for the stages still to come) when that is less.
stage_time() {
  local cap=$(($1 * CAP_SCALE)) keep=${2:-0} remaining
  remaining=$(( $(left) - RESERVE - keep ))
  [ "$remaining" -lt "$cap" ] && cap=$remaining
  echo "$cap"
}

# run_timed SECONDS LOG CMD...: runs CMD with a hard timeout, appending its output to LOG; returns
# its exit status (124 or 137 when it ran out of time).
run_timed() {
  local t=$1 log=$2; shift 2
  timeout -k 5 "$t" "$@" >>"$log" 2>&1
}

section() { cat >"$WORK/sections/$1.md"; }
# Python (PyTorch) sees the machine's own library path, not the one set up for our binaries.
PY=(env LD_LIBRARY_PATH="$ORIGINAL_LD_LIBRARY_PATH" python3)
LDCONFIG="$(command -v ldconfig 2>/dev/null || echo /sbin/ldconfig)"
# (Captured, not piped into grep -q: with pipefail an early grep exit can fail the pipeline.)
SYSTEM_LIBS="$("$LDCONFIG" -p 2>/dev/null)"

write_summary() {
  local i mode
  if [ "$HAVE_GPU" = 1 ]; then mode="GPU${GPU_LINE:+ ($GPU_LINE)}"; else mode="no GPU: ${NO_GPU_REASON}; GPU stages skipped, examples run briefly on the CPU"; fi
  {
    echo "# tapegrad GPU check"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), mode: $mode, budget ${BUDGET}s, elapsed $(($(now) - START))s, build dir ${BUILD#"$ROOT"/}"
    echo
    echo "| stage | result | detail | seconds |"
    echo "| --- | --- | --- | --- |"
    for i in "${!STAGES[@]}"; do
      echo "| ${STAGES[$i]} | ${STATUS[$i]} | ${DETAIL[$i]} | ${SECS[$i]} |"
    done
    for f in machine deps ctest examples bench sweep sanitizer files; do
      if [ -f "$WORK/sections/$f.md" ]; then echo; cat "$WORK/sections/$f.md"; fi
    done
  } >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}

# Copies the logs into $OUT (at most 8 files, each under 16 MiB) and prints the summary.
finish() {
  trap - EXIT INT TERM
  local f i
  for f in build ctest sanitizer examples; do
    [ -f "$WORK/$f.log" ] && tail -c 15000000 "$WORK/$f.log" >"$OUT/$f.log"
  done
  [ -f "$WORK/info.txt" ] && cp "$WORK/info.txt" "$OUT/info.txt"
  [ -f "$WORK/bench.json" ] && tail -c 15000000 "$WORK/bench.json" >"$OUT/bench.json"
  local extras=()
  for f in sweep compare bench ctest-junit.xml sanitizer-runs; do [ -e "$WORK/$f" ] && extras+=("$f"); done
  [ -f "$BUILD/CMakeCache.txt" ] && cp "$BUILD/CMakeCache.txt" "$WORK/CMakeCache.txt" && extras+=(CMakeCache.txt)
  # The comparison's weight and data files are inputs, not results: they stay behind.
  [ ${#extras[@]} -gt 0 ] && tar -C "$WORK" -czf "$OUT/extras.tgz" --exclude='*.safetensors' "${extras[@]}" 2>/dev/null
  if [ -f "$OUT/extras.tgz" ] && [ "$(stat -c %s "$OUT/extras.tgz")" -gt 15000000 ]; then
    tar -C "$WORK" -czf "$OUT/extras.tgz" --exclude='*.safetensors' --exclude='*.png' --exclude='bench' \
      --exclude='sanitizer-runs' "${extras[@]}" 2>/dev/null
  fi
  section files <<EOF
## Files in \$OUT

$(cd "$OUT" && ls -l --time-style=+ | awk 'NR > 1 {printf "- %s (%s bytes)\n", $NF, $5}')
EOF
  write_summary
  echo
  cat "$OUT/summary.md"
  # The stage table once more at the very end, where a cut-off output tail still shows it.
  echo
  echo "stages ($(($(now) - START))s of ${BUDGET}s):"
  for i in "${!STAGES[@]}"; do printf '  %-20s %-8s %s\n' "${STAGES[$i]}" "${STATUS[$i]}" "${DETAIL[$i]}"; done
  [ "$FAILED_STAGES" -eq 0 ] && exit 0 || exit 1
}
trap 'say "interrupted"; record interrupted FAIL "signal or unexpected exit" 0; finish' INT TERM
trap 'finish' EXIT

# ---- is there a GPU? -----------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  NO_GPU_REASON="--dry-run"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  NO_GPU_REASON="nvidia-smi not found"
elif ! grep -q '^GPU ' <<<"$(timeout 30 nvidia-smi -L 2>/dev/null)"; then
  NO_GPU_REASON="nvidia-smi lists no GPU"
else
  HAVE_GPU=1
fi
[ "$HAVE_GPU" = 1 ] || say "no GPU ($NO_GPU_REASON): GPU stages will be skipped"
# The stage caps are sized for the 16-core GPU machine; a 2-core development machine needs longer.
if [ "$HAVE_GPU" = 1 ]; then CAP_SCALE=${GPU_CHECK_CAP_SCALE:-1}; else CAP_SCALE=${GPU_CHECK_CAP_SCALE:-4}; fi

# The CUDA toolkit: nvcc on PATH, in /usr/local/cuda, or in PyTorch's Python environment.
NVCC="$(command -v nvcc 2>/dev/null || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ] && command -v python3 >/dev/null 2>&1; then
  NVCC="$(timeout 60 python3 -c 'import nvidia, glob, os; print(next(iter(sorted(p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "*", "bin", "nvcc")))), ""))' 2>/dev/null || true)"
fi
CUDA_ROOT=""
if [ -n "$NVCC" ]; then
  CUDA_ROOT="$(cd "$(dirname "$NVCC")/.." && pwd)"
  PATH="$(dirname "$NVCC"):$PATH"
  export PATH
fi
CUDA_LIBDIR=""
for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT/targets/x86_64-linux/lib"; do
  [ -n "$CUDA_ROOT" ] && ls "$d"/libcudart.so* >/dev/null 2>&1 && { CUDA_LIBDIR="$d"; break; }
done
# A toolkit without cuBLAS or the shared CUDA runtime (nvcc alone, say): take them from PyTorch's
# environment, where they exist only with versioned names that find_library does not try.
CUDA_LIB_ARGS=() CUDA_LIB_NOTE=""
if [ -n "$CUDA_ROOT" ]; then
  for name in cudart cublas cublasLt; do
    ls "$CUDA_ROOT"/lib64/lib$name.so "$CUDA_ROOT"/lib/lib$name.so "$CUDA_ROOT"/targets/x86_64-linux/lib/lib$name.so >/dev/null 2>&1 && continue
    so="$(timeout 30 find /usr /opt -path '*nvidia*' -name "lib$name.so.1[0-9]" 2>/dev/null | sort | tail -n1)"
    [ -n "$so" ] && CUDA_LIB_ARGS+=("-DCUDA_${name}_LIBRARY=$so") && CUDA_LIB_NOTE+="lib$name from $so; "
  done
fi
[ -z "$CUDA_MODE" ] && { if [ -n "$NVCC" ] && [ "$DRY" = 0 ]; then CUDA_MODE=ON; else CUDA_MODE=AUTO; fi; }

# cuDNN: beside the toolkit, else in PyTorch's environment (pip's nvidia-cudnn-cu13), else anywhere.
CUDNN_LIB="" CUDNN_INC="" CUDNN_NOTE=""
if [ -n "$CUDA_ROOT" ]; then
  for d in "$CUDA_LIBDIR" "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib"; do
    [ -n "$d" ] && [ -e "$d/libcudnn.so" ] && { CUDNN_LIB="$d/libcudnn.so"; break; }
  done
  [ -f "$CUDA_ROOT/include/cudnn.h" ] && CUDNN_INC="$CUDA_ROOT/include"
fi
if [ -z "$CUDNN_LIB" ] || [ -z "$CUDNN_INC" ]; then
  pydir="$(timeout 60 python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)"
  if [ -n "$pydir" ] && [ -e "$pydir/lib/libcudnn.so.9" ]; then
    CUDNN_LIB="$pydir/lib/libcudnn.so.9" CUDNN_NOTE="from PyTorch's environment"
    [ -f "$pydir/include/cudnn.h" ] && CUDNN_INC="$pydir/include"
  else
    found="$(timeout 30 find /usr /opt /usr/local -name 'libcudnn.so.9*' -not -name '*.so.9.*.*.*' 2>/dev/null | sort | head -n1)"
    [ -n "$found" ] && CUDNN_LIB="$found" CUDNN_NOTE="found by search"
  fi
  if [ -n "$CUDNN_LIB" ] && [ -z "$CUDNN_INC" ]; then
    inc="$(dirname "$(dirname "$CUDNN_LIB")")/include"
    if [ -f "$inc/cudnn.h" ]; then CUDNN_INC="$inc"
    elif [ -f "$BUNDLE/cudnn-include/cudnn.h" ]; then CUDNN_INC="$BUNDLE/cudnn-include"; CUDNN_NOTE="$CUDNN_NOTE, headers from gpu_bundle"
    fi
  fi
fi
CUDNN_LIBDIR=""
[ -n "$CUDNN_LIB" ] && CUDNN_LIBDIR="$(dirname "$CUDNN_LIB")"
extra_libdir="$CUDA_LIBDIR"
[ "$extra_libdir" = "$CUDNN_LIBDIR" ] && extra_libdir=""
export LD_LIBRARY_PATH="$WORK/libs${CUDNN_LIBDIR:+:$CUDNN_LIBDIR}${extra_libdir:+:$extra_libdir}${ORIGINAL_LD_LIBRARY_PATH:+:$ORIGINAL_LD_LIBRARY_PATH}"

# ---- info ------------------------------------------------------------------------------------------
GPU_LINE=""
if want info; then
  t0=$(now)
  first() { "$@" 2>&1 | head -n "${LINES_WANTED:-1}"; }
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "os: $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}") / $(uname -srm)"
    echo "cpus: $(nproc), memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
    if command -v nvidia-smi >/dev/null 2>&1; then
      echo "gpu: $(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n2 | paste -sd';')"
      echo "nvidia-smi CUDA version: $(timeout 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n1)"
    else
      echo "gpu: none (nvidia-smi not found)"
    fi
    echo "nvcc: ${NVCC:-not found} $( [ -n "$NVCC" ] && "$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*')"
    echo "g++: $(first g++ --version)"
    echo "glibc: $(first ldd --version)"
    echo "cmake: $(first cmake --version)"
    echo "ninja: $(first ninja --version)"
    echo "pkg-config: $(command -v pkg-config || echo 'not found (the bundled pkgconf is used)')"
    echo "python3: $(command -v python3) $(first python3 --version)"
    echo "torch: $(timeout 120 "${PY[@]}" -c 'import torch; c = torch.cuda.is_available(); print(torch.__version__, "cuda", torch.version.cuda, "available", c, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0) if c else "")' 2>&1 | tail -n1)"
    echo "cuda libraries: ${CUDA_LIBDIR:-not found beside nvcc} ${CUDA_LIB_NOTE}"
    echo "cudnn library: ${CUDNN_LIB:-not found} ${CUDNN_NOTE}"
    echo "cudnn headers: ${CUDNN_INC:-not found} $( [ -n "$CUDNN_INC" ] && grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' "$CUDNN_INC/cudnn_version.h" | awk '{print $3}' | paste -sd.)"
    echo "libcudnn.so.9 copies: $(timeout 20 find /usr /opt /root /home -name 'libcudnn.so.9' 2>/dev/null | head -n4 | paste -sd' ')"
    echo "compute-sanitizer: $(PATH="$PATH:$CUDA_ROOT/bin:$CUDA_ROOT/compute-sanitizer" command -v compute-sanitizer || echo 'not found')"
    echo "libgfortran.so.5 on the system: $(grep -q 'libgfortran.so.5 ' <<<"$SYSTEM_LIBS" && echo yes || echo no)"
  } >"$WORK/info.txt" 2>&1
  GPU_LINE="$(grep '^gpu:' "$WORK/info.txt" | cut -d' ' -f2-)"
  cat "$WORK/info.txt"
  section machine <<EOF
## Machine

\`\`\`
$(cat "$WORK/info.txt")
\`\`\`
EOF
  record info PASS "" $(($(now) - t0))
fi

# ---- dependencies from the bundle ------------------------------------------------------------------
DEPS_NOTE=""
GXX_MAJOR="$(g++ -dumpversion 2>/dev/null | cut -d. -f1)"
BENCH_OFF=0
if want deps; then
  t0=$(now)
  if [ -f "$BUNDLE/deps.tar.gz" ] && mkdir -p "$PREFIX" && tar -C "$PREFIX" -xzf "$BUNDLE/deps.tar.gz"; then
    lib="$PREFIX/usr/lib/x86_64-linux-gnu"
    export CMAKE_PREFIX_PATH="$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    export PKG_CONFIG_PATH="$lib/openblas-openmp/pkgconfig:$lib/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    ln -sf "$lib/openblas-openmp/libopenblas.so.0" "$WORK/libs/"
    # Runtime libraries of OpenBLAS, only where the machine lacks them (never shadow its own).
    for so in libgfortran.so.5 libquadmath.so.0; do
      grep -q "^[[:space:]]*$so " <<<"$SYSTEM_LIBS" || { ln -sf "$lib/$so" "$WORK/libs/"; DEPS_NOTE+="$so from the bundle; "; }
    done
    if ! command -v pkg-config >/dev/null 2>&1; then
      printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$lib" "$PREFIX/usr/bin/pkgconf" >"$WORK/bin/pkg-config"
      chmod +x "$WORK/bin/pkg-config"
      export PATH="$WORK/bin:$PATH"
      DEPS_NOTE+="pkg-config from the bundle; "
    fi
    # Also in the default search path, for a child that sets PKG_CONFIG_PATH for itself (the
    # install test does) and still needs the bundle's openblas.pc behind tapegrad.pc.
    sys_pc="$(pkg-config --variable pc_path pkg-config 2>/dev/null || true)"
    export PKG_CONFIG_LIBDIR="$lib/openblas-openmp/pkgconfig:$lib/pkgconfig:$PREFIX/usr/share/pkgconfig${sys_pc:+:$sys_pc}"
    # The bundle's static GoogleTest and libbenchmark come from g++ 12; an older g++ builds
    # GoogleTest from the bundled source and goes without the benchmarks.
    if [ -n "$GXX_MAJOR" ] && [ "$GXX_MAJOR" -lt 12 ]; then
      gt="$WORK/gtest"
      if run_timed "$(stage_time 90)" "$WORK/build.log" cmake -S "$PREFIX/usr/src/googletest" -B "$gt/build" -G Ninja \
           -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX="$gt/prefix" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 &&
         run_timed "$(stage_time 90)" "$WORK/build.log" ninja -C "$gt/build" install; then
        export CMAKE_PREFIX_PATH="$gt/prefix:$CMAKE_PREFIX_PATH"
        DEPS_NOTE+="GoogleTest built from source (g++ $GXX_MAJOR < 12); "
      else
        DEPS_NOTE+="GoogleTest from source FAILED (see build.log); "
      fi
      BENCH_OFF=1
      DEPS_NOTE+="benchmarks off (libbenchmark needs g++ >= 12's libstdc++); "
    fi
    # Let processes that reset LD_LIBRARY_PATH (the install test's consumer) find what the build
    # links from outside the system paths. Only on the lent machine, never on a developer's.
    if [ "$HAVE_GPU" = 1 ] && { [ -e /dev/nvidia0 ] || [ -e /dev/nvidiactl ]; } && [ "$(id -u)" -eq 0 ] && [ -w /etc/ld.so.conf.d ]; then
      printf '%s\n' "$WORK/libs" ${CUDNN_LIBDIR:+"$CUDNN_LIBDIR"} >/etc/ld.so.conf.d/zz-tapegrad-gpu-check.conf && "$LDCONFIG" 2>/dev/null
    fi
    record deps PASS "gpu_bundle unpacked${DEPS_NOTE:+: ${DEPS_NOTE%; }}" $(($(now) - t0))
  else
    record deps WARN "no gpu_bundle/deps.tar.gz (run tools/gpu_prepare.sh and carry gpu_bundle); relying on the machine's packages" $(($(now) - t0))
  fi
  section deps <<EOF
## Dependencies

- bundle: $( [ -f "$BUNDLE/MANIFEST.txt" ] && head -n2 "$BUNDLE/MANIFEST.txt" | paste -sd';' || echo none)
- notes: ${DEPS_NOTE:-none}
- CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH:-}
- PKG_CONFIG_LIBDIR=${PKG_CONFIG_LIBDIR:-}
- LD_LIBRARY_PATH=${LD_LIBRARY_PATH}
EOF
fi

# ---- configure and build ---------------------------------------------------------------------------
if want configure && [ "$SKIP_BUILD" = 0 ]; then
  t0=$(now)
  args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA="$CUDA_MODE"
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
  [ -n "$NVCC" ] && [ "$CUDA_MODE" != OFF ] && args+=(-DCMAKE_CUDA_COMPILER="$NVCC")
  [ -n "$CUDNN_LIB" ] && args+=(-DCUDNN_LIBRARY="$CUDNN_LIB")
  [ ${#CUDA_LIB_ARGS[@]} -gt 0 ] && args+=("${CUDA_LIB_ARGS[@]}")
  [ -n "$CUDNN_INC" ] && args+=(-DCUDNN_INCLUDE_DIR="$CUDNN_INC")
  [ "$BENCH_OFF" = 1 ] && args+=(-DTAPEGRAD_BUILD_BENCHMARKS=OFF)
  echo "+ cmake ${args[*]}" >>"$WORK/build.log"
  run_timed "$(stage_time 90)" "$WORK/build.log" cmake "${args[@]}"
  rc=$?
  found="$(grep -E '^(CMAKE_CUDA_COMPILER|CUDNN_LIBRARY|CUDNN_INCLUDE_DIR|GTest_DIR|benchmark_DIR|nlohmann_json_DIR|ZLIB_LIBRARY_RELEASE|CXXOPTS_INCLUDE_DIR|pkgcfg_lib_OPENBLAS_openblas):' "$BUILD/CMakeCache.txt" 2>/dev/null | sed 's/:[A-Z]*=/ = /')"
  cuda_on="$(grep -o 'CUDA backend: [A-Z]*' "$WORK/build.log" | tail -n1)"
  { echo; echo "found by CMake:"; echo "$found"; } >>"$WORK/deps-found.txt"
  printf '\n### Found by CMake\n\n```\n%s\n```\n' "$found" >>"$WORK/sections/deps.md"
  if [ $rc -eq 0 ]; then record configure PASS "$cuda_on" $(($(now) - t0))
  else
    record configure "$( [ $rc -ge 124 ] && echo TIMEOUT || echo FAIL)" "cmake exit $rc: $(grep -A2 -m1 -E 'CMake Error' "$WORK/build.log" | paste -sd' ' | cut -c1-200)" $(($(now) - t0))
    # Without the CUDA backend there is still the CPU suite and the examples to learn from.
    if [ "$CUDA_MODE" != OFF ] && [ $rc -lt 124 ]; then
      t0=$(now)
      echo "+ cmake (again, CPU only) -DTAPEGRAD_CUDA=OFF" >>"$WORK/build.log"
      if run_timed "$(stage_time 90)" "$WORK/build.log" cmake "${args[@]}" -DTAPEGRAD_CUDA=OFF; then
        record configure-cpu-only PASS "the CUDA configure failed; building the CPU backend alone" $(($(now) - t0))
      else
        record configure-cpu-only FAIL "cmake failed without CUDA too" $(($(now) - t0))
      fi
    fi
  fi
fi

if want build && [ "$SKIP_BUILD" = 0 ]; then
  t0=$(now)
  if [ -f "$BUILD/build.ninja" ]; then
    t=$(stage_time 240)
    run_timed "$t" "$WORK/build.log" ninja -C "$BUILD" -k 0 -j "$JOBS"
    rc=$?
    failed=$(grep -c '^FAILED:' "$WORK/build.log")
    warnings=$(grep -c 'warning:' "$WORK/build.log")
    lib_ok=$(ls "$BUILD"/libtapegrad.so* >/dev/null 2>&1 && echo yes || echo no)
    detail="$failed failed targets, $warnings warning lines, library built: $lib_ok"
    if [ $rc -eq 0 ]; then record build PASS "$detail" $(($(now) - t0))
    elif [ $rc -ge 124 ] && [ $rc -ne 125 ]; then record build TIMEOUT "after ${t}s; $detail" $(($(now) - t0))
    else record build FAIL "$detail; first: $(grep -m1 -E 'error:|undefined reference|^FAILED:' "$WORK/build.log" | cut -c1-160)" $(($(now) - t0))
    fi
  else
    record build SKIP "not configured" 0
  fi
elif [ "$SKIP_BUILD" = 1 ]; then
  record build SKIP "--skip-build: using $BUILD as it is" 0
fi

# ---- ctest -----------------------------------------------------------------------------------------
count() { grep -cE "$1" "$2" 2>/dev/null || true; }
if want ctest; then
  t0=$(now)
  t=$(stage_time 120)
  if [ ! -f "$BUILD/CTestTestfile.cmake" ]; then
    record ctest SKIP "no test tree in $BUILD" 0
  elif [ "$t" -lt 20 ]; then
    record ctest SKIP "no time left" 0
  else
    run_timed "$t" "$WORK/ctest.log" ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 120 \
      --output-junit "$WORK/ctest-junit.xml"
    rc=$?
    log="$WORK/ctest.log"
    passed=$(count 'Test +#[0-9]+: .* Passed' "$log")
    failed=$(count 'Test +#[0-9]+: .*(\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout|Not Run)' "$log")
    skipped=$(count 'Test +#[0-9]+: .*Skipped' "$log")
    cuda_passed=$(count 'Test +#[0-9]+: Cuda.* Passed' "$log")
    cuda_failed=$(count 'Test +#[0-9]+: Cuda.*(\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout|Not Run)' "$log")
    cuda_skipped=$(count 'Test +#[0-9]+: Cuda.*Skipped' "$log")
    detail="$passed passed, $failed failed, $skipped skipped (Cuda*: $cuda_passed passed, $cuda_failed failed, $cuda_skipped skipped)"
    failing="$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ' | head -n 60)"
    section ctest <<EOF
## ctest

$(grep -E 'tests passed|Total Test time' "$log" | tail -n2)

Failing tests (first 60):

\`\`\`
${failing:-none}
\`\`\`
EOF
    if [ $rc -ge 124 ] && [ $rc -ne 125 ] && ! grep -q 'Total Test time' "$log"; then
      record ctest TIMEOUT "after ${t}s; counted so far: $detail" $(($(now) - t0))
    elif [ "$failed" -gt 0 ] || [ $rc -ne 0 ]; then record ctest FAIL "$detail" $(($(now) - t0))
    else record ctest PASS "$detail" $(($(now) - t0))
    fi
  fi
fi

# The sanitizer runs last and takes what is left; the examples and benchmarks leave it at least this.
KEEP_FOR_SANITIZER=0
[ "$HAVE_GPU" = 1 ] && want sanitizer && KEEP_FOR_SANITIZER=60

# ---- examples --------------------------------------------------------------------------------------
if want examples; then
  t0=$(now)
  ex="$BUILD/examples"
  data=/usr/share/datasets/fashion-mnist
  [ -f "$data/train-images-idx3-ubyte.gz" ] || data="$BUNDLE/fashion-mnist"
  if [ "$HAVE_GPU" = 1 ]; then
    runs=("mlp_seed --device cuda --batches 300"
          "mlp_seed --device cpu --batches 100 --threads $(nproc)"
          "mlp_fashion --device cuda --epochs 1 --limit 10000 --data $data"
          "lstm_fashion --device cuda --epochs 1 --limit 10000 --data $data")
  else
    runs=("mlp_seed --device cpu --batches 20"
          "mlp_fashion --device cpu --epochs 1 --limit 1000 --data $data"
          "lstm_fashion --device cpu --epochs 1 --limit 500 --data $data")
  fi
  rows="" ok=0 bad=0
  for r in "${runs[@]}"; do
    prog="${r%% *}"
    if [ ! -x "$ex/$prog" ]; then rows+="| $r | not built | |\n"; bad=$((bad + 1)); continue; fi
    if [[ "$r" == *fashion* ]] && [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then rows+="| $r | skipped | no Fashion-MNIST |\n"; continue; fi
    t=$(stage_time 60 "$KEEP_FOR_SANITIZER")
    if [ "$t" -lt 10 ]; then rows+="| $r | not run | no time left |\n"; continue; fi
    run_log="$WORK/example_run.log"
    : >"$run_log"
    s0=$(now)
    # shellcheck disable=SC2086
    run_timed "$t" "$run_log" "$ex/"$r
    rc=$?
    { echo "=== $r (timeout ${t}s, exit $rc) ==="; cat "$run_log"; } >>"$WORK/examples.log"
    if [ $rc -eq 0 ]; then key="$(grep -E 'mean step time|epoch +[0-9]+ +train loss' "$run_log" | tail -n1)"
    else key="$(grep -v '^[[:space:]]*$' "$run_log" | tail -n1)"
    fi
    key="$(cut -c1-150 <<<"${key//|//}")"
    if [ $rc -eq 0 ]; then ok=$((ok + 1)); rows+="| $r | ok, $(($(now) - s0))s | $key |\n"
    else bad=$((bad + 1)); rows+="| $r | **exit $rc** | $key |\n"
    fi
  done
  section examples <<EOF
## Examples$( [ "$HAVE_GPU" = 1 ] || echo " (no GPU: brief CPU runs that only check the plumbing)")

| run | result | last key line |
| --- | --- | --- |
$(printf "%b" "$rows")
EOF
  if [ $bad -gt 0 ]; then record examples FAIL "$ok ok, $bad failed" $(($(now) - t0))
  else record examples PASS "$ok ok" $(($(now) - t0))
  fi
fi

# ---- benchmarks, the sweep and the PyTorch comparison ----------------------------------------------
if want bench; then
  t0=$(now)
  min_time="${BENCH_MIN_TIME:-0.05}"
  rows="" ok=0 bad=0
  for b in $(find "$BUILD/benchmarks" -maxdepth 2 -type f -perm -u+x -name 'bench_*' 2>/dev/null | sort); do
    name="$(basename "$b")"
    t=$(stage_time 60 "$KEEP_FOR_SANITIZER")
    if [ "$t" -lt 10 ]; then rows+="| $name | not run (no time left) |\n"; continue; fi
    timeout -k 5 "$t" "$b" --benchmark_format=json --benchmark_min_time="$min_time" \
      >"$WORK/bench/$name.json" 2>"$WORK/bench/$name.err"
    rc=$?
    if [ $rc -eq 0 ]; then ok=$((ok + 1)); rows+="| $name | ok |\n"; else bad=$((bad + 1)); rows+="| $name | **exit $rc** |\n"; fi
  done
  # The GPU-vs-CPU sweep: any built program named *sweep* (not a test), run with --quick in its own folder.
  sweep_rows=""
  for s in $(find "$BUILD" -maxdepth 3 -type f -perm -u+x -name '*sweep*' ! -name 'test_*' ! -name '*.so*' -not -path '*/CMakeFiles/*' 2>/dev/null | sort); do
    t=$(stage_time 90 "$KEEP_FOR_SANITIZER")
    if [ "$t" -lt 15 ]; then sweep_rows+="- $(basename "$s"): not run, no time left\n"; continue; fi
    extra=()
    grep -q -- '--out' <<<"$(timeout 20 "$s" --help 2>&1)" && extra=(--out "$WORK/sweep")
    (cd "$WORK/sweep" && timeout -k 5 "$t" "$s" --quick "${extra[@]}") >"$WORK/sweep/$(basename "$s").log" 2>&1
    rc=$?
    sweep_rows+="- $(basename "$s") --quick: exit $rc\n"
    [ $rc -eq 0 ] && ok=$((ok + 1)) || bad=$((bad + 1))
  done
  # The PyTorch comparison scripts, each in its own folder, told where the build is.
  for py in "$ROOT"/benchmarks/compare/*.py; do
    [ -f "$py" ] || continue
    t=$(stage_time 60 "$KEEP_FOR_SANITIZER")
    if [ "$t" -lt 15 ]; then sweep_rows+="- $(basename "$py"): not run, no time left\n"; continue; fi
    extra=()
    help="$(timeout 60 "${PY[@]}" "$py" --help 2>&1)"
    grep -q -- '--quick' <<<"$help" && extra+=(--quick)
    grep -q -- '--build-dir' <<<"$help" && extra+=(--build-dir "$BUILD")
    grep -q -- '--budget' <<<"$help" && extra+=(--budget 1)
    (cd "$WORK/compare" && TAPEGRAD_BUILD_DIR="$BUILD" PYTHONUNBUFFERED=1 timeout -k 5 "$t" "${PY[@]}" "$py" "${extra[@]}") \
      >"$WORK/compare/$(basename "$py" .py).log" 2>&1
    rc=$?
    sweep_rows+="- $(basename "$py") ${extra[*]}: exit $rc\n"
    [ $rc -eq 0 ] && ok=$((ok + 1)) || bad=$((bad + 1))
  done
  # One bench.json from the per-binary files, and the first rows as a table.
  table="$(python3 - "$WORK/bench" "$WORK/bench.json" <<'EOF' 2>&1
import glob, json, os, sys
src, dst = sys.argv[1], sys.argv[2]
merged = {}
rows = []
for path in sorted(glob.glob(os.path.join(src, "*.json"))):
    name = os.path.basename(path)[:-5]
    try:
        doc = json.load(open(path))
    except Exception as e:
        merged[name] = {"error": f"unreadable JSON ({e})", "stderr": open(path[:-5] + ".err").read()[-4000:]}
        continue
    merged[name] = doc
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        extra = ", ".join(f"{k}={v:.4g}" for k, v in b.items()
                          if k not in ("real_time", "cpu_time", "iterations", "repetitions", "repetition_index",
                                       "threads", "family_index", "per_family_instance_index")
                          and isinstance(v, (int, float)) and not isinstance(v, bool))
        rows.append(f"| {name} | {b['name']} | {b['real_time']:.4g} {b.get('time_unit', '')} | {extra} |")
json.dump(merged, open(dst, "w"), indent=1)
print(f"{len(rows)} benchmarks\n")
print("| binary | benchmark | real time | counters |\n| --- | --- | --- | --- |")
print("\n".join(rows[:80]))
if len(rows) > 80:
    print(f"\n({len(rows) - 80} more in bench.json)")
EOF
)"
  sweep_files="$(cd "$WORK" && find sweep compare -type f \( -name '*.csv' -o -name '*.json' -o -name '*.svg' -o -name '*.png' -o -name '*.md' \) 2>/dev/null | sort | head -n 40)"
  section bench <<EOF
## Benchmarks

| binary | result |
| --- | --- |
$(printf "%b" "$rows")
$table
EOF
  section sweep <<EOF
## Sweep and PyTorch comparison

$( [ -n "$sweep_rows" ] && printf "%b" "$sweep_rows" || echo "No sweep program and no benchmarks/compare/*.py in this tree yet.")
$( [ -n "$sweep_files" ] && { echo; echo "Files (in extras.tgz):"; echo "$sweep_files" | sed 's/^/- /'; })
$(for f in "$WORK"/sweep/*.csv; do [ -f "$f" ] && { echo; echo "\`$(basename "$f")\` (first 30 lines):"; echo '```'; head -n 30 "$f"; echo '```'; }; done)
EOF
  if [ $((ok + bad)) -eq 0 ]; then record bench SKIP "no benchmark binaries built" $(($(now) - t0))
  elif [ $bad -gt 0 ]; then record bench FAIL "$ok ok, $bad failed" $(($(now) - t0))
  else record bench PASS "$ok ok" $(($(now) - t0))
  fi
fi

# ---- compute-sanitizer over the CUDA test binaries -------------------------------------------------
if want sanitizer; then
  t0=$(now)
  bins=()
  for b in "$BUILD"/tests/test_cuda_*; do [ -x "$b" ] && [ -f "$b" ] && bins+=("$b"); done
  cs="$(PATH="$PATH:$CUDA_ROOT/bin:$CUDA_ROOT/compute-sanitizer" command -v compute-sanitizer 2>/dev/null)"
  if [ "$HAVE_GPU" = 0 ]; then
    record sanitizer SKIP "no GPU; would run memcheck, racecheck, synccheck over: $(for b in "${bins[@]}"; do basename "$b"; done | paste -sd' ')" 0
  elif [ -z "$cs" ]; then
    record sanitizer SKIP "compute-sanitizer not found" 0
  elif [ ${#bins[@]} -eq 0 ]; then
    record sanitizer SKIP "no tests/test_cuda_* binaries built" 0
  else
    stage=$(stage_time 120)
    n=${#bins[@]}
    filter=()
    [ -n "${SANITIZER_GTEST_FILTER:-}" ] && filter=(--gtest_filter="$SANITIZER_GTEST_FILTER")
    rows="" total_findings=0 tool_broken="" problems=0
    mkdir -p "$WORK/sanitizer-runs"
    for tool in memcheck racecheck synccheck; do
      case $tool in memcheck) share=55 ;; racecheck) share=30 ;; synccheck) share=15 ;; esac
      per=$((stage * share / 100 / n))
      [ $per -lt 15 ] && per=15
      for b in "${bins[@]}"; do
        name="$(basename "$b")"
        t=$(stage_time $per)
        if [ -n "$tool_broken" ]; then rows+="| $name | $tool | not run | tool unusable here |\n"; continue; fi
        if [ "$t" -lt 10 ] || [ $(( $(now) - t0 )) -gt "$stage" ]; then rows+="| $name | $tool | not run | no time left |\n"; continue; fi
        log="$WORK/sanitizer-runs/$name.$tool.log"
        echo "=== $tool $name (timeout ${t}s) ===" >>"$WORK/sanitizer.log"
        run_timed "$t" "$log" "$cs" --tool "$tool" --error-exitcode 99 --print-limit 20 "$b" --gtest_brief=1 "${filter[@]}"
        rc=$?
        head -c 200000 "$log" >>"$WORK/sanitizer.log"
        errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+$')
        hazards=$(grep -cE '^========= +(Invalid|Race|Barrier|Program hit|Error|Uninitialized|Leaked)' "$log" || true)
        tests_failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | wc -l)
        [ "$tests_failed" = 0 ] && tests_failed=""
        if grep -qE 'Device not supported|Target application terminated before first instrumented API call|error 999' "$log"; then
          tool_broken="$tool"
          rows+="| $name | $tool | unusable | $(grep -m1 -E 'Device not supported|error 999|terminated' "$log" | cut -c1-100) |\n"
          problems=$((problems + 1))
          continue
        fi
        case $rc in
          0) verdict="clean" ;;
          99) verdict="**${errors:-?} findings**"; total_findings=$((total_findings + ${errors:-1})) ;;
          124|137) verdict="timeout after ${t}s (${hazards} hazard lines so far)"; total_findings=$((total_findings + hazards)) ;;
          *) verdict="exit $rc${tests_failed:+, $tests_failed failed tests}" ;;
        esac
        [ $rc -ne 0 ] && problems=$((problems + 1))
        rows+="| $name | $tool | $verdict | ${errors:+ERROR SUMMARY $errors} |\n"
      done
    done
    section sanitizer <<EOF
## compute-sanitizer

Filter: ${SANITIZER_GTEST_FILTER:-all tests}. Full output in sanitizer.log (first 200 kB of each run).

| binary | tool | result | note |
| --- | --- | --- | --- |
$(printf "%b" "$rows")
EOF
    if [ -n "$tool_broken" ]; then record sanitizer FAIL "compute-sanitizer unusable on this machine ($tool_broken)" $(($(now) - t0))
    elif [ $total_findings -gt 0 ]; then record sanitizer FAIL "$total_findings findings over ${n} binaries" $(($(now) - t0))
    elif [ $problems -gt 0 ]; then record sanitizer FAIL "no findings, but $problems runs failed or timed out" $(($(now) - t0))
    else record sanitizer PASS "clean: ${n} binaries x memcheck, racecheck, synccheck" $(($(now) - t0))
    fi
  fi
fi

exit 0  # the EXIT trap packs the results, prints the summary and sets the exit status
