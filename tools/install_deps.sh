#!/usr/bin/env bash
# Installs the Debian packages tapegrad builds against, when any are missing, plus any packages
# named as arguments (e.g. the fuzzing toolchain). As root it runs apt-get; otherwise it prints
# the command to run and stops.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libopenblas-openmp-dev libgtest-dev libbenchmark-dev
          zlib1g-dev nlohmann-json3-dev libcxxopts-dev dataset-fashion-mnist fortunes libopenmpi-dev openmpi-bin "$@")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "tapegrad needs these Debian packages: ${missing[*]}" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
