// The GPU-vs-CPU sweep's results and how they are written: a table for the terminal, a CSV, a
// JSON document and an SVG plot, each with the crossover batch size of every curve marked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../common/step_timer.h"
#include "../common/system_info.h"
#include "../models/named_configs.h"

namespace tapegrad::bench {

// One model swept over batch size.
struct SweepCurve {
  std::string name;  // a named configuration ("lstm_small") or a grid point ("mlp W=1024")
  ModelShape shape;
  std::vector<int64_t> batches;
};

struct SweepPoint {
  int64_t batch = 0;
  StepTiming cpu;
  std::optional<StepTiming> gpu;                           // absent without a GPU, or when the GPU run failed
  std::string gpu_error;                                   // why the GPU run failed, if it did
  std::optional<double> copy_pageable_ms, copy_pinned_ms;  // host-to-device copy of one batch (x and y)
  int64_t batch_bytes = 0;                                 // bytes of one batch's inputs and targets

  // cpu time / gpu time: above 1 the GPU is faster.
  std::optional<double> speedup() const;
};

struct CurveResult {
  SweepCurve curve;
  std::vector<SweepPoint> points;  // in the order of curve.batches
};

// Where the GPU starts to win on one curve: the smallest grid batch from which the GPU is faster at
// every larger batch measured, and the batch where the speed-up crosses 1 by log-log
// interpolation between that point and the one before it.
struct Crossover {
  enum class Kind { NoGpuData, Never, FromSmallest, At } kind = Kind::NoGpuData;
  int64_t first_winning_batch = 0;
  double interpolated_batch = 0;
  std::string describe() const;
};
Crossover find_crossover(const CurveResult& result);

struct SweepReport {
  SystemInfo system;
  bool gpu_found = false;
  bool quick = false;
  std::vector<CurveResult> curves;
};

std::string format_table(const SweepReport& report);
void write_csv(const SweepReport& report, const std::string& path);
void write_json(const SweepReport& report, const std::string& path);
// With a GPU: speed-up against batch per curve, the 1x line and each crossover marked.
// Without: CPU examples per second against batch.
void write_plot(const SweepReport& report, const std::string& path);

}  // namespace tapegrad::bench
