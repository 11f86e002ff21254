// Rows of the framework comparison and how they are printed and saved.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/system_info.h"

namespace tapegrad::bench {

struct SideResult {
  double median_ms = 0, min_ms = 0;
  double first_loss = 0, final_loss = 0;  // after step 1 and after the last step
};

struct CompareRow {
  std::string config;  // "lstm_small"
  int64_t batch = 0;
  int64_t steps = 0;  // per side, warm-up included; both sides run the same steps on the same data
  SideResult tapegrad;
  std::optional<SideResult> libtorch;

  std::optional<double> ratio() const;  // tapegrad ms / LibTorch ms: below 1 tapegrad is faster
  // Largest relative difference of the two first and the two final losses (0 without LibTorch);
  // losses under 0.01 are compared as if they were 0.01.
  double loss_rel_diff() const;
};

struct CompareReport {
  SystemInfo system;
  std::string device;    // of the tapegrad side
  std::string libtorch;  // version, BLAS and parallel info, or why it is absent
  std::vector<CompareRow> rows;
};

constexpr double kLossTolerance = 1e-3;  // relative; beyond it the row is flagged

std::string format_table(const CompareReport& report);
void write_json(const CompareReport& report, const std::string& path);

}  // namespace tapegrad::bench
