// Rows of the framework comparison and how they are printed and saved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/system_info.h"
#include "models/named_configs.h"
#include "sgemm_ceiling.h"

namespace tapegrad::bench {

// What a run times: whole training steps, or the model's forward alone under each side's inference
// mode (tapegrad::InferenceMode, torch::InferenceMode) with the model in eval().
enum class CompareMode { Train, Inference };
// "train" or "inference"; throws tapegrad::Error naming both for anything else.
CompareMode parse_mode(const std::string& name);
const char* mode_name(CompareMode mode);

// How far tapegrad's outputs are from LibTorch's, over every output compared (inference mode).
struct OutputDifference {
  double max_abs_diff = 0;  // max |a - b| over all elements
  double max_abs_ref = 0;   // max |b|, b the LibTorch side's outputs
  int64_t elements = 0;     // compared; 0 means nothing was compared
  // max_abs_diff / max(1, max_abs_ref): the quantity the agree rule bounds.
  double rel() const;
  // Within kOutputTolerance: max |a - b| <= kOutputTolerance * max(1, max |b|).
  bool agree() const;
  // Adds `count` more element pairs (a: tapegrad, b: LibTorch) to the running maxima.
  void add(const float* a, const float* b, int64_t count);
};

struct SideResult {
  double median_ms = 0, min_ms = 0;
  double first_loss = 0, check_loss = 0, final_loss = 0;  // after step 1, step kCheckStep and the last step
};

struct CompareRow {
  std::string config;  // "lstm_small"
  int64_t batch = 0;
  int64_t steps = 0;                  // per side, warm-up included; both sides run the same steps on the same data
  double gemm_flops_per_example = 0;  // ModelShape::gemm_flops_per_example(): a floor on the work (of the
                                      // forward alone, gemm_forward_flops_per_example(), in inference mode)
  SideResult tapegrad;                // all zeros when tapegrad was not timed (--side libtorch)
  std::optional<SideResult> libtorch;
  // With --autocast bf16: the same steps, from the same weights, under CPU autocast to bfloat16.
  std::optional<SideResult> tapegrad_bf16, libtorch_bf16;
  // Inference mode: the two sides' outputs on every batch of the pool (absent without both sides).
  std::optional<OutputDifference> outputs;
  // Training mode: each side's step split into forward, backward and optimiser, from a separate,
  // shorter pass of phased steps after the timing above (so that the clock reads stay out of
  // median_ms): each phase's median over blocks of its mean per step, as median_ms is of whole steps;
  // absent for a side not timed. phase_steps: phased steps per side.
  std::optional<StepPhases> tapegrad_phases, libtorch_phases;
  int64_t phase_steps = 0;
  // Adam's memory floor over the model's parameters on the CPU (common/adam_floor.h), measured after the
  // split: what any Adam step must take there, set beside each side's optimiser phase. 0: not measured
  // (another device, tapegrad not timed, or inference).
  double optimizer_floor_ms = 0;
  // Round trip between the two first threads (common/core_exchange.h) just before and just after
  // this row's timing: which state of a virtual machine the row ran in. 0: not measured.
  double core_exchange_ns_before = 0, core_exchange_ns_after = 0;

  std::optional<double> ratio() const;  // tapegrad ms / LibTorch ms: below 1 tapegrad is faster
  // Largest relative difference of the two sides' losses after step 1 and after step kCheckStep
  // (0 without both sides); losses under 0.01 are compared as if they were 0.01.
  double loss_rel_diff() const;
  // The same for the losses after the last step: for information, since two float implementations
  // round differently and their training drifts apart with the number of steps.
  double final_loss_rel_diff() const;
  // Inference mode: the row's outputs agree (true when nothing was compared, as loss_rel_diff is 0).
  bool outputs_agree() const { return !outputs || outputs->agree(); }
  // GEMM work of a step (a forward in inference mode) over its median time; 0 (or none) when there is nothing to
  // divide.
  double tapegrad_gflops() const;
  std::optional<double> libtorch_gflops() const;
};

struct CompareReport {
  SystemInfo system;
  std::string device;                     // of the tapegrad side
  std::string libtorch;                   // version, BLAS and parallel info, or why it is absent
  std::optional<SgemmCeiling> ceiling;    // absent with --no-ceiling or a GPU tapegrad side
  std::string sides = "both";             // which sides trained: both, tapegrad or libtorch
  CompareMode mode = CompareMode::Train;  // inference: the rows time forwards, and compare outputs, not losses
  double peak_rss_mib = 0;                // of the whole process, at the end of the run
  std::vector<CompareRow> rows;

  // tapegrad's GFLOP/s as a percentage of the ceiling, when one was measured.
  std::optional<double> percent_of_ceiling(const CompareRow& row) const;
};

constexpr double kLossTolerance = 1e-3;  // relative; beyond it the row is flagged
// The step whose loss is checked besides the first: a fixed count (the timing runs at least 2 + 6
// steps), so the check does not depend on how many steps the time budget allowed.
constexpr int kCheckStep = 8;
// Inference mode's agree rule (OutputDifference::agree): the same model on the same input in two float
// implementations, one forward, no drift over steps; relative to max(1, max |b|) so that logits near 0
// are held to an absolute 1e-5.
constexpr double kOutputTolerance = 1e-5;

// A side's optimiser takes a large share of its step when over this share of the phases' sum and at
// least kOptimizerRemarkMargin above the other side's share (or with no other side measured): then
// the step is mostly Adam's elementwise passes, not the model's products.
constexpr double kOptimizerRemarkShare = 0.40;
constexpr double kOptimizerRemarkMargin = 0.15;

// Each phase's median over one side's samples (all zeros for none).
StepPhases median_phases(const std::vector<StepPhases>& samples);
// A phase's part of the step: phase_ms over the sum of the three phases (0 when the sum is 0).
double phase_share(const StepPhases& phases, double phase_ms);

// The training table, or in inference mode the forward table (ms per forward, outputs compared).
std::string format_table(const CompareReport& report);
// The --autocast rows: each side's bf16 step against tapegrad's f32 step of the same run; empty
// when no row has them.
std::string format_autocast_table(const CompareReport& report);
// Training mode: each side's forward, backward and optimiser ms and their shares of the sum, per
// row; empty in inference mode or when no row has a split.
std::string format_phase_table(const CompareReport& report);
// One line for each side of a row whose optimiser takes a large share of its step (the rule above),
// naming the side, whichever it is; none when the shares are balanced.
std::vector<std::string> phase_remarks(const CompareReport& report);
void write_json(const CompareReport& report, const std::string& path);

}  // namespace tapegrad::bench
