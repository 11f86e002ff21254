#!/usr/bin/env bash
# tapegrad against LibTorch on this machine, one command: installs the build dependencies and
# Debian's LibTorch (libtorch-dev, PyTorch 1.13 for the CPU) when missing, builds tapegrad_compare
# in ./build and runs every named configuration on both, alternating, on the same threads, from the
# same weights and data. Prints ms per step, the ratio tapegrad/LibTorch and both sides' losses;
# leaves results.json (and the weights and data) in ./compare_out.
#
#   bash tools/run_compare.sh                      # all configurations, threads = CPU count
#   bash tools/run_compare.sh --threads 2 --configs lstm_small:16,mlp_seed
#
# Threads are pinned (OMP_PROC_BIND=close, OMP_PLACES=cores) unless those are already set; both
# frameworks run in one process on one OpenMP runtime, so they share that pinning exactly.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

as_root bash tools/install_deps.sh
if ! dpkg-query -W -f='${Status}' libtorch-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "installing libtorch-dev (LibTorch 1.13, CPU; about 1 GB with its dependencies)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libtorch-dev >/dev/null
fi

cmake -S . -B build -G Ninja >/dev/null
cmake --build build --target tapegrad_compare --parallel "$(nproc)"

defaults=(--out compare_out)
[[ " $* " == *" --threads"* ]] || defaults+=(--threads "$(nproc)")
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
exec ./build/benchmarks/compare/tapegrad_compare "${defaults[@]}" "$@"
