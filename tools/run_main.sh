#!/usr/bin/env bash
# The main job: builds tapegrad and runs the examples with short settings on the best device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh "$@"
./build/examples/train_demo
./build/examples/mlp_seed --batches 300
./build/examples/mlp_fashion --epochs 1
./build/examples/lstm_fashion --epochs 1 --limit 10000
