#!/usr/bin/env bash
# The main job: builds what it runs (the library, four examples and the sweep; not the ~400 test
# and benchmark targets), runs the examples with short settings on the best device, then the short
# GPU-vs-CPU sweep (CPU only where no GPU is found; its files go to ./sweep_out).
# Extra arguments go to cmake's configure step, e.g. -DTAPEGRAD_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -G Ninja "$@"
cmake --build build --parallel "$(nproc)" --target train_demo mlp_seed mlp_fashion lstm_fashion gpu_cpu_sweep
./build/examples/train_demo
./build/examples/mlp_seed --batches 300
./build/examples/mlp_fashion --epochs 1
./build/examples/lstm_fashion --epochs 1 --limit 10000
./build/benchmarks/gpu_cpu_sweep --quick --out sweep_out
