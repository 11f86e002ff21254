#!/usr/bin/env bash
# Every CUDA test on the CPU: the CUDA emulation build (-DTAPEGRAD_CUDA=EMULATE, docs/testing.md)
# compiles the same cuda/ sources with the host compiler against tests/cuda_emulator, in
# ./build-emu, and runs the CUDA tests and the emulator's negative controls there. Only cuDNN's
# tests skip (cuDNN is not emulated). Needs Debian's libboost-context-dev.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
bash tools/install_deps.sh libboost-context-dev
cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=EMULATE -DTAPEGRAD_BUILD_EXAMPLES=OFF \
  -DTAPEGRAD_BUILD_BENCHMARKS=OFF -DTAPEGRAD_DISTRIBUTED=OFF >/dev/null
cmake --build build-emu --parallel "$jobs"
# One OpenMP thread per test: ctest runs as many tests as there are cores.
OMP_NUM_THREADS=1 ctest --test-dir build-emu --output-on-failure --parallel "$jobs" --timeout 900 \
  -R 'Cuda|Cudnn|Pinned|KernelTables|EmulatorControls|NamedConfigs'
