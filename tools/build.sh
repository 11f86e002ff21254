#!/usr/bin/env bash
# Configures and builds tapegrad in ./build (Release; CUDA when a toolkit is found).
# Extra arguments go to cmake's configure step, e.g. -DTAPEGRAD_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -G Ninja "$@"
cmake --build build --parallel "$(nproc)"
