#!/usr/bin/env bash
# The sanitizer checks CI runs:
#  1. AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer) over the whole test suite in
#     the CUDA emulation build (-DTAPEGRAD_CUDA=EMULATE, docs/testing.md), built in ./build-asan:
#     every CPU test, and every CUDA test with its kernels running instrumented on the emulated GPU.
#     The caching allocator is bypassed (TAPEGRAD_CUDA_CACHING_ALLOCATOR=0): every tensor gets its
#     own allocation with poisoned memory after it, as compute-sanitizer needs on a real GPU, so a
#     kernel's out-of-bounds access is an ASan report. Any report aborts its test, so ctest fails.
#     TAPEGRAD_ASAN_CUDA=OFF makes it a CPU-only build.
#  2. ThreadSanitizer: the autograd thread tests (two threads training two separate models at
#     once must get exactly what each gets alone) and the shared-parameter tests (threads recording
#     ops on and backpropagating into the same parameters, concurrent checkpoint writers), built in
#     ./build-tsan, two threads checkpointing with dropout at once (each replays its own draws), and
#     threads sharing one model under InferenceMode (docs/inference.md).
# OpenMP is kept to one thread under the sanitizers: libgomp is not instrumented, so TSan would
# report its internal synchronisation, and one thread keeps ASan's run short. The MPI tests run in
# the ordinary build only: OpenMPI's own allocations would be reported as leaks.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
bash tools/install_deps.sh libboost-context-dev
# -O1 -g1: AddressSanitizer's recommended level, with line tables for the reports' stacks. Against
# -O2 -g it halves the compile time of the kernel files, which dominate CI's time.
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
        -DTAPEGRAD_BUILD_EXAMPLES=OFF -DTAPEGRAD_BUILD_BENCHMARKS=OFF
        -DTAPEGRAD_DISTRIBUTED=OFF)
export OMP_NUM_THREADS=1

asan_cuda="${TAPEGRAD_ASAN_CUDA:-EMULATE}"
echo "== AddressSanitizer + UndefinedBehaviorSanitizer: every test (CUDA: $asan_cuda)"
cmake -S . -B build-asan "${common[@]}" -DTAPEGRAD_CUDA="$asan_cuda" -DTAPEGRAD_SANITIZE=address,undefined >/dev/null
cmake --build build-asan --parallel "$jobs"
# Every ctest case, one process per test program (tools/run_ctest_grouped.py: an instrumented
# process start costs half a second, which per case was over ten minutes of CI).
TAPEGRAD_CUDA_CACHING_ALLOCATOR=0 \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  python3 tools/run_ctest_grouped.py --test-dir build-asan -j "$jobs" --timeout 1800
# CUDA graphs need the caching allocator (a captured step replays into the graph's private pool),
# so their tests skip above, and without it every cudaFree waits for the device, so the checks that
# a step makes no host synchronisation are left out above: they run here instrumented with it on.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  python3 tools/run_ctest_grouped.py --test-dir build-asan -j "$jobs" --timeout 1800 \
    -R '^(CudaGraph\..*|CudaInference\..*|DeferredChecks\..*|NamedConfigs\.CudaStepHasNoHostSync|NamedConfigs\.CudaGraphStepIsOneLaunch)$'

echo "== ThreadSanitizer: concurrent training, shared parameters, concurrent checkpoint writers, shared inference"
cmake -S . -B build-tsan "${common[@]}" -DTAPEGRAD_CUDA=OFF -DTAPEGRAD_SANITIZE=thread >/dev/null
cmake --build build-tsan --parallel "$jobs" --target test_autograd test_anomaly test_shared_parameters \
  test_checkpoint_atomic test_checkpoint test_inference_mode test_inference
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  build-tsan/tests/test_autograd --gtest_filter='AutogradThreads.*:GradMode.GradModeIsThreadLocal'
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_anomaly --gtest_filter='Anomaly.IsPerThread'
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/test_shared_parameters
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_checkpoint_atomic --gtest_filter='CheckpointAtomic.ConcurrentWriters*'
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_checkpoint --gtest_filter='Checkpoint.TwoThreadsCheckpointingKeepTheirOwnMasks'
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_inference_mode --gtest_filter='InferenceMode.IsPerThread'
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/tests/test_inference --gtest_filter='Inference.ThreadsShareOneModel'
