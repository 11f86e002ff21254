#!/usr/bin/env bash
# The main job: builds tapegrad, runs the examples with short settings on the best device, then the
# short GPU-vs-CPU sweep (CPU only where no GPU is found; its files go to ./sweep_out).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh "$@"
./build/examples/train_demo
./build/examples/mlp_seed --batches 300
./build/examples/mlp_fashion --epochs 1
./build/examples/lstm_fashion --epochs 1 --limit 10000
./build/benchmarks/gpu_cpu_sweep --quick --out sweep_out
