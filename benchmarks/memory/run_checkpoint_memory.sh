#!/usr/bin/env bash
# Runs benchmarks/memory/checkpoint_memory once per variant and round, alternating the variants
# (no checkpointing, then 2, 4, ... runs of steps) so that a shared machine's load falls on all of
# them alike, and prints one table: per variant the median over rounds of each process's median
# step time, the best step, and the memory (the same in every round).
#
#   bash benchmarks/memory/run_checkpoint_memory.sh                     # lstm_large:64, 2 threads, 3 rounds
#   bash benchmarks/memory/run_checkpoint_memory.sh --rounds 5 --segments "1 4 16"
#   bash benchmarks/memory/run_checkpoint_memory.sh --bin /tmp/old/checkpoint_memory   # another build
#
# Needs ./build/benchmarks/checkpoint_memory (configure with -DTAPEGRAD_BUILD_BENCHMARKS=ON).
set -euo pipefail
cd "$(dirname "$0")/../.."

config=lstm_large:64
threads=2
rounds=3
segments="1 2 4 8 16 32"
budget=3
bin=./build/benchmarks/checkpoint_memory
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --segments) segments=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "usage: $0 [--config NAME:BATCH] [--threads N] [--rounds N] [--segments \"1 2 4\"] [--budget S] [--bin PATH]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "build $bin first" >&2; exit 1; }
export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for s in $segments; do
    "$bin" --config "$config" --segments "$s" --threads "$threads" --budget "$budget" | grep '^result' >>"$out"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=") for kv in line.split()[1:])
    rows.setdefault(int(f["segments"]), []).append(f)
base = rows.get(1)
t0 = statistics.median(float(f["step_ms"]) for f in base) if base else None
a0 = float(base[0]["activations_mib"]) if base else None
b0 = min(float(f["min_ms"]) for f in base) if base else None
f0 = min(float(f["forward_min_ms"]) for f in base) if base else None
if base:
    print(f"plain: forward {f0:.0f} ms of a {b0:.0f} ms step (best of each), {100 * f0 / b0:.0f}%")
print(f"{'segments':>8} {'step ms':>9} {'best ms':>8} {'x time':>7} {'x best':>7} {'floor':>6} {'activations MiB':>16} {'x less':>7} {'live peak MiB':>14} {'peak RSS MiB':>13}")
for s in sorted(rows):
    fs = rows[s]
    t = statistics.median(float(f["step_ms"]) for f in fs)
    best = min(float(f["min_ms"]) for f in fs)
    a = float(fs[0]["activations_mib"])
    rt = f"{t / t0:.2f}" if t0 else "-"
    rb = f"{best / b0:.2f}" if b0 else "-"
    floor = f"{1 + (s - 1) / s * f0 / b0:.2f}" if b0 else "-"
    ra = f"{a0 / a:.1f}" if a0 else "-"
    print(f"{s:>8} {t:>9.0f} {best:>8.0f} {rt:>7} {rb:>7} {floor:>6} {a:>16.1f} {ra:>7} {float(fs[0]['live_peak_mib']):>14.1f} {float(fs[0]['peak_rss_mib']):>13.0f}")
PY
