#!/usr/bin/env bash
# The GPU side of the framework comparison, for the GPU machine (tools/gpu_check.sh calls it):
# tapegrad trains every named configuration on CUDA and leaves its weights, data and timings in
# OUT; then PyTorch (with CUDA) trains the same models from the same files, eager and compiled,
# and prints the ratios. Usage: gpu_compare.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-compare_out_gpu}
"$build/benchmarks/compare/tapegrad_compare" --device cuda --no-libtorch --budget 2 --out "$out"
python3 benchmarks/compare/pytorch_compare.py --dir "$out" --device cuda
