#!/usr/bin/env bash
# Peak memory (RSS) of a training run, tapegrad against LibTorch: each configuration trains in a
# process of its own for each side (tapegrad_compare --side), and the process's high-water mark is
# read from results.json. Both processes load both libraries and write the same weights and data
# first, so the difference between the columns is the training itself.
#
#   bash tools/compare_peak_rss.sh                              # every configuration, 2 threads
#   bash tools/compare_peak_rss.sh --threads 1 --configs mlp_seed:64,lstm_large:64
#
# Needs ./build/benchmarks/compare/tapegrad_compare built with LibTorch (tools/run_compare.sh does it).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=2
configs=all
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    *) echo "usage: $0 [--threads N] [--configs LIST]" >&2; exit 2 ;;
  esac
done

compare=./build/benchmarks/compare/tapegrad_compare
[ -x "$compare" ] || { echo "build $compare first (bash tools/run_compare.sh does)" >&2; exit 1; }
if [ "$configs" = all ]; then
  configs=mlp_seed:64,mlp_seed:256,mlp_seed:1024,mlp_fashion:64,mlp_fashion:256,lstm_row:64,lstm_small:1,lstm_small:16,lstm_small:64,lstm_small:256,lstm_large:64
fi
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

peak() {  # side config -> MiB
  "$compare" --threads "$threads" --budget 0.5 --no-ceiling --side "$1" --configs "$2" --out "$out/$1" >/dev/null
  python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["peak_rss_mib"]))' "$out/$1/results.json"
}

printf '%-18s %14s %14s %8s\n' config "tapegrad MiB" "LibTorch MiB" "tg/lt"
for config in ${configs//,/ }; do
  tg=$(peak tapegrad "$config")
  lt=$(peak libtorch "$config")
  printf '%-18s %14s %14s %8.2f\n' "$config" "$tg" "$lt" "$(python3 -c "print($tg / $lt)")"
done
