// The models and batch sizes gpu_cpu_sweep measures, and the choice of some of them (--curves).
#pragma once

#include <string>
#include <vector>

#include "sweep/sweep_report.h"

namespace tapegrad::bench {

// The quick grid (mlp_seed and lstm_small) or the full one (every curve of docs/benchmarks.md).
std::vector<SweepCurve> sweep_grid(bool quick);

// The curves of `grid` named in `names` (comma-separated, as in the table: "char_lstm,mlp W=256"),
// in the grid's order, each once. Throws tapegrad::Error naming --curves, the unknown name and the
// names there are.
std::vector<SweepCurve> select_curves(const std::vector<SweepCurve>& grid, const std::string& names);

}  // namespace tapegrad::bench
