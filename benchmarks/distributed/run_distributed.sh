#!/usr/bin/env bash
# Runs bench_distributed the way docs/distributed.md reports it: 1 rank x 2 threads against
# 2 ranks x 1 thread (with the no-communication reference), the two sides launched alternately for
# ROUNDS rounds so that a noisy, shared machine disturbs both alike; then the all-reduce sweep.
# Prints the load average around each launch and the median of every measurement over the rounds.
#   benchmarks/distributed/run_distributed.sh BUILD_DIR [ROUNDS] [STEPS] > results.csv
set -euo pipefail
build=${1:?usage: run_distributed.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-5}
steps=${3:-30}
bench="$build/benchmarks/distributed/bench_distributed"
models=mlp_seed:1024,lstm_small:256,mlp_fashion
# Root in containers; no binding, so each rank's threads may use any core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch=(mpirun --bind-to none)
load() { echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
"${launch[@]}" -np 1 "$bench" --header --steps 1 --warmup 0 | grep '^#' | tee -a "$raw"
for round in $(seq "$rounds"); do
  load
  "${launch[@]}" -np 1 -x OMP_NUM_THREADS=2 "$bench" --threads 2 --models "$models" --steps "$steps" | tee -a "$raw"
  load
  "${launch[@]}" -np 2 -x OMP_NUM_THREADS=1 "$bench" --threads 1 --models "$models" --steps "$steps" --nosync | tee -a "$raw"
done
for round in $(seq "$rounds"); do
  load
  "${launch[@]}" -np 2 -x OMP_NUM_THREADS=1 "$bench" --threads 1 --allreduce | tee -a "$raw"
done
load

# Medians over the rounds, per measurement.
echo "# medians over the rounds"
echo "# median,name,global_batch,ranks,threads,mode,step_ms,examples_per_s,exposed_comm_ms,comm_busy_ms,exposed_fraction,min_step_ms,forward_ms,backward_ms,optimizer_ms"
echo "# median_allreduce,bytes,mpi_us,process_group_us,mpi_min_us,process_group_min_us (medians of the runs' medians, least of their minima)"
awk -F, '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  $1 == "model" { k = $2 "," $3 "," $4 "," $5 "," $6; keys[k]; step[k] = step[k] " " $7; rate[k] = rate[k] " " $8;
                  exposed[k] = exposed[k] " " $9; busy[k] = busy[k] " " $10; frac[k] = frac[k] " " $11;
                  low[k] = low[k] " " $13; fwd[k] = fwd[k] " " $14; bwd[k] = bwd[k] " " $15; upd[k] = upd[k] " " $16 }
  function least(list,   n, a, i, m) { n = split(list, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] + 0 < m + 0) m = a[i]; return m }
  $1 == "allreduce" { k = $2; sizes[k]; mpi[k] = mpi[k] " " $5; pg[k] = pg[k] " " $6; mpimin[k] = mpimin[k] " " $8;
                      pgmin[k] = pgmin[k] " " $9 }
  END {
    for (k in keys) printf "median,%s,%.2f,%.0f,%.2f,%.2f,%.3f,%.2f,%.2f,%.2f,%.2f\n", k, median(step[k]), median(rate[k]),
                           median(exposed[k]), median(busy[k]), median(frac[k]), median(low[k]), median(fwd[k]),
                           median(bwd[k]), median(upd[k])
    for (k in sizes) printf "median_allreduce,%s,%.1f,%.1f,%.1f,%.1f\n", k, median(mpi[k]), median(pg[k]), least(mpimin[k]),
                            least(pgmin[k])
  }' "$raw" | sort -t, -k1,1 -k2,2 -k2n -k4,4n
