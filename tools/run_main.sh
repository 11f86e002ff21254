#!/usr/bin/env bash
# The main job: builds tapegrad and runs the training demo on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh "$@"
./build/examples/train_demo
