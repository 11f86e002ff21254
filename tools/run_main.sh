#!/usr/bin/env bash
# The main job: builds tapegrad and runs the examples with short settings on the best device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh "$@"
./build/examples/train_demo
./build/examples/mlp_seed --batches 300
