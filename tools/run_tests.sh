#!/usr/bin/env bash
# Builds tapegrad and runs every test through ctest (CUDA tests skip where no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh "$@"
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
