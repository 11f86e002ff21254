// Rows of the framework comparison and how they are printed and saved.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/system_info.h"
#include "sgemm_ceiling.h"

namespace tapegrad::bench {

struct SideResult {
  double median_ms = 0, min_ms = 0;
  double first_loss = 0, check_loss = 0, final_loss = 0;  // after step 1, step kCheckStep and the last step
};

struct CompareRow {
  std::string config;  // "lstm_small"
  int64_t batch = 0;
  int64_t steps = 0;                  // per side, warm-up included; both sides run the same steps on the same data
  double gemm_flops_per_example = 0;  // ModelShape::gemm_flops_per_example(): a floor on the work
  SideResult tapegrad;                // all zeros when tapegrad was not timed (--side libtorch)
  std::optional<SideResult> libtorch;
  // With --autocast bf16: the same steps, from the same weights, under CPU autocast to bfloat16.
  std::optional<SideResult> tapegrad_bf16, libtorch_bf16;

  std::optional<double> ratio() const;  // tapegrad ms / LibTorch ms: below 1 tapegrad is faster
  // Largest relative difference of the two sides' losses after step 1 and after step kCheckStep
  // (0 without both sides); losses under 0.01 are compared as if they were 0.01.
  double loss_rel_diff() const;
  // The same for the losses after the last step: for information, since two float implementations
  // round differently and their training drifts apart with the number of steps.
  double final_loss_rel_diff() const;
  // GEMM work of a step over its median time; 0 (or none) when there is nothing to divide.
  double tapegrad_gflops() const;
  std::optional<double> libtorch_gflops() const;
};

struct CompareReport {
  SystemInfo system;
  std::string device;                   // of the tapegrad side
  std::string libtorch;                 // version, BLAS and parallel info, or why it is absent
  std::optional<SgemmCeiling> ceiling;  // absent with --no-ceiling or a GPU tapegrad side
  std::string sides = "both";           // which sides trained: both, tapegrad or libtorch
  double peak_rss_mib = 0;              // of the whole process, at the end of the run
  std::vector<CompareRow> rows;

  // tapegrad's GFLOP/s as a percentage of the ceiling, when one was measured.
  std::optional<double> percent_of_ceiling(const CompareRow& row) const;
};

constexpr double kLossTolerance = 1e-3;  // relative; beyond it the row is flagged
// The step whose loss is checked besides the first: a fixed count (the timing runs at least 2 + 6
// steps), so the check does not depend on how many steps the time budget allowed.
constexpr int kCheckStep = 8;

std::string format_table(const CompareReport& report);
// The --autocast rows: each side's bf16 step against tapegrad's f32 step of the same run; empty
// when no row has them.
std::string format_autocast_table(const CompareReport& report);
void write_json(const CompareReport& report, const std::string& path);

}  // namespace tapegrad::bench
