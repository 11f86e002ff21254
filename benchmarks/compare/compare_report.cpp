// Table and JSON output of the framework comparison.
#include "compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/step_timer.h"
#include "tapegrad/core/error.h"

namespace tapegrad::bench {

CompareMode parse_mode(const std::string& name) {
  if (name == "train") return CompareMode::Train;
  TG_CHECK(name == "inference", "compare: --mode must be train or inference, got '", name, "'");
  return CompareMode::Inference;
}

const char* mode_name(CompareMode mode) {
  return mode == CompareMode::Train ? "train" : "inference";
}

double OutputDifference::rel() const {
  return max_abs_diff / std::max(1.0, max_abs_ref);
}

bool OutputDifference::agree() const {
  // Written as the rule is stated (not via rel()) so that a NaN on either side disagrees too.
  return max_abs_diff <= kOutputTolerance * std::max(1.0, max_abs_ref);
}

void OutputDifference::add(const float* a, const float* b, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    // A NaN difference sticks (std::max would drop it), so that a NaN output disagrees.
    if (std::isnan(d) || d > max_abs_diff) max_abs_diff = d;
    max_abs_ref = std::max(max_abs_ref, std::abs(static_cast<double>(b[i])));
  }
  elements += count;
}

std::optional<double> CompareRow::ratio() const {
  if (!libtorch || libtorch->median_ms <= 0 || tapegrad.median_ms <= 0) return std::nullopt;
  return tapegrad.median_ms / libtorch->median_ms;
}

namespace {

// Relative, except that losses under 0.01 count as 0.01: a model that has memorised its few batches
// drives the loss towards 0, where rounding alone makes the relative difference large.
double loss_rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-2});
}

}  // namespace

double CompareRow::loss_rel_diff() const {
  if (!libtorch || tapegrad.median_ms <= 0) return 0;
  return std::max(loss_rel(tapegrad.first_loss, libtorch->first_loss),
                  loss_rel(tapegrad.check_loss, libtorch->check_loss));
}

double CompareRow::final_loss_rel_diff() const {
  if (!libtorch || tapegrad.median_ms <= 0) return 0;
  return loss_rel(tapegrad.final_loss, libtorch->final_loss);
}

namespace {

double gflops(double flops_per_example, int64_t batch, double ms) {
  return ms > 0 ? flops_per_example * static_cast<double>(batch) / (ms * 1e-3) * 1e-9 : 0;
}

}  // namespace

double CompareRow::tapegrad_gflops() const {
  return gflops(gemm_flops_per_example, batch, tapegrad.median_ms);
}

std::optional<double> CompareRow::libtorch_gflops() const {
  if (!libtorch) return std::nullopt;
  return gflops(gemm_flops_per_example, batch, libtorch->median_ms);
}

std::optional<double> CompareReport::percent_of_ceiling(const CompareRow& row) const {
  if (!ceiling || ceiling->gflops() <= 0 || row.tapegrad.median_ms <= 0) return std::nullopt;
  return 100 * row.tapegrad_gflops() / ceiling->gflops();
}

namespace {

// Inference mode: forward times and the outputs' comparison in place of the losses.
std::string format_inference_table(const CompareReport& report) {
  std::ostringstream out;
  char line[320];
  std::snprintf(line, sizeof line, "%-12s %6s %12s %12s %7s %8s %8s %8s %8s %10s %10s %6s  %s\n", "config", "batch",
                "tapegrad ms", "libtorch ms", "tg/lt", "min-min", "tg GF/s", "lt GF/s", "tg %ceil", "max|lt|",
                "max|tg-lt|", "N", "outputs");
  out << line;
  for (const CompareRow& r : report.rows) {
    char tg_ms[32] = "-", lt_ms[32] = "-", ratio[32] = "-", min_ratio[32] = "-", tg_gflops[32] = "-";
    char lt_gflops[32] = "-", percent[32] = "-", ref[32] = "-", diff[32] = "-", verdict[48] = "-";
    const bool tg_timed = r.tapegrad.median_ms > 0;
    if (tg_timed) {
      std::snprintf(tg_ms, sizeof tg_ms, "%.4f", r.tapegrad.median_ms);
      std::snprintf(tg_gflops, sizeof tg_gflops, "%.1f", r.tapegrad_gflops());
    }
    if (std::optional<double> p = report.percent_of_ceiling(r)) std::snprintf(percent, sizeof percent, "%.0f%%", *p);
    if (r.libtorch) {
      std::snprintf(lt_ms, sizeof lt_ms, "%.4f", r.libtorch->median_ms);
      std::snprintf(lt_gflops, sizeof lt_gflops, "%.1f", *r.libtorch_gflops());
    }
    if (r.libtorch && tg_timed) {
      std::snprintf(ratio, sizeof ratio, "%.2f", *r.ratio());
      std::snprintf(min_ratio, sizeof min_ratio, "%.2f", r.tapegrad.min_ms / r.libtorch->min_ms);
    }
    if (r.outputs) {
      std::snprintf(ref, sizeof ref, "%.3g", r.outputs->max_abs_ref);
      std::snprintf(diff, sizeof diff, "%.2e", r.outputs->max_abs_diff);
      if (r.outputs->agree())
        std::snprintf(verdict, sizeof verdict, "agree");
      else
        std::snprintf(verdict, sizeof verdict, "MISMATCH rel %.2e", r.outputs->rel());
    }
    std::snprintf(line, sizeof line, "%-12s %6lld %12s %12s %7s %8s %8s %8s %8s %10s %10s %6lld  %s\n",
                  r.config.c_str(), static_cast<long long>(r.batch), tg_ms, lt_ms, ratio, min_ratio, tg_gflops,
                  lt_gflops, percent, ref, diff, static_cast<long long>(r.steps), verdict);
    out << line;
  }
  return out.str();
}

}  // namespace

std::string format_table(const CompareReport& report) {
  if (report.mode == CompareMode::Inference) return format_inference_table(report);
  std::ostringstream out;
  char line[320];
  char loss_k_tg[16], loss_k_lt[16];
  std::snprintf(loss_k_tg, sizeof loss_k_tg, "loss%d tg", kCheckStep);
  std::snprintf(loss_k_lt, sizeof loss_k_lt, "loss%d lt", kCheckStep);
  std::snprintf(line, sizeof line, "%-12s %6s %12s %12s %7s %8s %8s %8s %8s %10s %10s %10s %10s %10s %10s %5s  %s\n",
                "config", "batch", "tapegrad ms", "libtorch ms", "tg/lt", "min-min", "tg GF/s", "lt GF/s", "tg %ceil",
                "loss1 tg", "loss1 lt", loss_k_tg, loss_k_lt, "lossN tg", "lossN lt", "N", "losses");
  out << line;
  for (const CompareRow& r : report.rows) {
    char lt_ms[32] = "-", ratio[32] = "-", min_ratio[32] = "-", l1[32] = "-", ln[32] = "-";
    char lt_gflops[32] = "-", percent[32] = "-";
    const char* agree = "-";
    if (std::optional<double> p = report.percent_of_ceiling(r)) std::snprintf(percent, sizeof percent, "%.0f%%", *p);
    char tg_ms[32] = "-", tg_gflops[32] = "-", tg_l1[32] = "-", tg_lk[32] = "-", tg_ln[32] = "-", lk[32] = "-";
    const bool tg_timed = r.tapegrad.median_ms > 0;
    if (tg_timed) {
      std::snprintf(tg_ms, sizeof tg_ms, "%.3f", r.tapegrad.median_ms);
      std::snprintf(tg_gflops, sizeof tg_gflops, "%.1f", r.tapegrad_gflops());
      std::snprintf(tg_l1, sizeof tg_l1, "%.6f", r.tapegrad.first_loss);
      std::snprintf(tg_lk, sizeof tg_lk, "%.6f", r.tapegrad.check_loss);
      std::snprintf(tg_ln, sizeof tg_ln, "%.6f", r.tapegrad.final_loss);
    }
    if (r.libtorch) {
      std::snprintf(lt_gflops, sizeof lt_gflops, "%.1f", *r.libtorch_gflops());
      std::snprintf(lt_ms, sizeof lt_ms, "%.3f", r.libtorch->median_ms);
      std::snprintf(l1, sizeof l1, "%.6f", r.libtorch->first_loss);
      std::snprintf(lk, sizeof lk, "%.6f", r.libtorch->check_loss);
      std::snprintf(ln, sizeof ln, "%.6f", r.libtorch->final_loss);
    }
    if (r.libtorch && tg_timed) {
      std::snprintf(ratio, sizeof ratio, "%.2f", *r.ratio());
      std::snprintf(min_ratio, sizeof min_ratio, "%.2f", r.tapegrad.min_ms / r.libtorch->min_ms);
      agree = r.loss_rel_diff() <= kLossTolerance ? "agree" : "MISMATCH";
    }
    std::snprintf(line, sizeof line,
                  "%-12s %6lld %12s %12s %7s %8s %8s %8s %8s %10s %10s %10s %10s %10s %10s %5lld  %s\n",
                  r.config.c_str(), static_cast<long long>(r.batch), tg_ms, lt_ms, ratio, min_ratio, tg_gflops,
                  lt_gflops, percent, tg_l1, l1, tg_lk, lk, tg_ln, ln, static_cast<long long>(r.steps), agree);
    out << line;
  }
  return out.str();
}

std::string format_autocast_table(const CompareReport& report) {
  std::ostringstream out;
  bool any = false;
  for (const CompareRow& r : report.rows) any = any || r.tapegrad_bf16 || r.libtorch_bf16;
  if (!any) return "";
  char line[320];
  std::snprintf(line, sizeof line, "%-12s %6s %10s %10s %9s %10s %10s %9s %11s %11s\n", "config", "batch", "tg f32 ms",
                "tg bf16 ms", "bf16/f32", "lt f32 ms", "lt bf16 ms", "tg/lt bf16", "loss1 tg bf", "loss1 lt bf");
  out << line;
  auto ms = [](const std::optional<SideResult>& side, char* buffer, size_t size) {
    if (side) std::snprintf(buffer, size, "%.3f", side->median_ms);
  };
  for (const CompareRow& r : report.rows) {
    char tg[32] = "-", tg_bf[32] = "-", ratio[32] = "-", lt[32] = "-", lt_bf[32] = "-", cross[32] = "-";
    char l_tg[32] = "-", l_lt[32] = "-";
    if (r.tapegrad.median_ms > 0) std::snprintf(tg, sizeof tg, "%.3f", r.tapegrad.median_ms);
    ms(r.tapegrad_bf16, tg_bf, sizeof tg_bf);
    ms(r.libtorch, lt, sizeof lt);
    ms(r.libtorch_bf16, lt_bf, sizeof lt_bf);
    if (r.tapegrad_bf16 && r.tapegrad.median_ms > 0)
      std::snprintf(ratio, sizeof ratio, "%.2f", r.tapegrad_bf16->median_ms / r.tapegrad.median_ms);
    if (r.tapegrad_bf16 && r.libtorch_bf16)
      std::snprintf(cross, sizeof cross, "%.2f", r.tapegrad_bf16->median_ms / r.libtorch_bf16->median_ms);
    if (r.tapegrad_bf16) std::snprintf(l_tg, sizeof l_tg, "%.6f", r.tapegrad_bf16->first_loss);
    if (r.libtorch_bf16) std::snprintf(l_lt, sizeof l_lt, "%.6f", r.libtorch_bf16->first_loss);
    std::snprintf(line, sizeof line, "%-12s %6lld %10s %10s %9s %10s %10s %9s %11s %11s\n", r.config.c_str(),
                  static_cast<long long>(r.batch), tg, tg_bf, ratio, lt, lt_bf, cross, l_tg, l_lt);
    out << line;
  }
  return out.str();
}

StepPhases median_phases(const std::vector<StepPhases>& samples) {
  std::vector<double> forward, backward, optimizer;
  for (const StepPhases& p : samples) {
    forward.push_back(p.forward_ms);
    backward.push_back(p.backward_ms);
    optimizer.push_back(p.optimizer_ms);
  }
  // Each phase's own median: a slow forward in one block and a slow Adam in another do not add up.
  return {median(forward), median(backward), median(optimizer)};
}

double phase_share(const StepPhases& phases, double phase_ms) {
  const double total = phases.total_ms();
  return total > 0 ? phase_ms / total : 0;
}

namespace {

// One side's cells of the phase table: forward, backward, optimiser and sum in ms, then the three
// shares in percent as "fwd/bwd/opt"; "-" throughout for a side without a split.
std::vector<std::string> phase_cells(const std::optional<StepPhases>& phases) {
  if (!phases) return {"-", "-", "-", "-", "-"};
  const StepPhases& p = *phases;
  char ms[4][32], shares[48];
  const double values[4] = {p.forward_ms, p.backward_ms, p.optimizer_ms, p.total_ms()};
  for (int i = 0; i < 4; ++i) std::snprintf(ms[i], sizeof ms[i], "%.3f", values[i]);
  std::snprintf(shares, sizeof shares, "%.0f/%.0f/%.0f", 100 * phase_share(p, p.forward_ms),
                100 * phase_share(p, p.backward_ms), 100 * phase_share(p, p.optimizer_ms));
  return {ms[0], ms[1], ms[2], ms[3], shares};
}

// The optimiser of `side` takes a large share of its step, against `other` when that was measured.
bool optimizer_dominates(const StepPhases& side, const std::optional<StepPhases>& other) {
  const double share = phase_share(side, side.optimizer_ms);
  if (share <= kOptimizerRemarkShare) return false;
  return !other || share >= phase_share(*other, other->optimizer_ms) + kOptimizerRemarkMargin;
}

// "Adam takes 66% of LibTorch's step (0.610 of 0.920 ms)".
std::string optimizer_clause(const char* side_name, const StepPhases& p) {
  char text[160];
  std::snprintf(text, sizeof text, "Adam takes %.0f%% of %s's step (%.3f of %.3f ms)",
                100 * phase_share(p, p.optimizer_ms), side_name, p.optimizer_ms, p.total_ms());
  return text;
}

std::string optimizer_remark(const CompareRow& r, const char* name, const StepPhases& side, const char* other_name,
                             const std::optional<StepPhases>& other) {
  std::string line = "note: " + r.config + ":" + std::to_string(r.batch) + ": " + optimizer_clause(name, side);
  if (other) {
    char rest[96];
    std::snprintf(rest, sizeof rest, "; %s's Adam %.0f%% (%.3f ms)", other_name,
                  100 * phase_share(*other, other->optimizer_ms), other->optimizer_ms);
    line += rest;
  }
  return line;
}

}  // namespace

std::string format_phase_table(const CompareReport& report) {
  if (report.mode == CompareMode::Inference) return "";
  bool any = false;
  for (const CompareRow& r : report.rows) any = any || r.tapegrad_phases || r.libtorch_phases;
  if (!any) return "";
  std::ostringstream out;
  char line[320];
  const char* format = "%-12s %6s %8s %8s %8s %9s %8s %16s %8s %8s %8s %8s %16s %6s\n";
  std::snprintf(line, sizeof line, format, "config", "batch", "tg fwd", "tg bwd", "tg opt", "opt floor", "tg sum",
                "tg fwd/bwd/opt %", "lt fwd", "lt bwd", "lt opt", "lt sum", "lt fwd/bwd/opt %", "N");
  out << line;
  for (const CompareRow& r : report.rows) {
    const std::vector<std::string> tg = phase_cells(r.tapegrad_phases), lt = phase_cells(r.libtorch_phases);
    char floor[32] = "-";
    if (r.optimizer_floor_ms > 0) std::snprintf(floor, sizeof floor, "%.3f", r.optimizer_floor_ms);
    std::snprintf(line, sizeof line, format, r.config.c_str(), std::to_string(r.batch).c_str(), tg[0].c_str(),
                  tg[1].c_str(), tg[2].c_str(), floor, tg[3].c_str(), tg[4].c_str(), lt[0].c_str(), lt[1].c_str(),
                  lt[2].c_str(), lt[3].c_str(), lt[4].c_str(), std::to_string(r.phase_steps).c_str());
    out << line;
  }
  return out.str();
}

std::vector<std::string> phase_remarks(const CompareReport& report) {
  std::vector<std::string> lines;
  if (report.mode == CompareMode::Inference) return lines;
  for (const CompareRow& r : report.rows) {
    if (r.tapegrad_phases && optimizer_dominates(*r.tapegrad_phases, r.libtorch_phases))
      lines.push_back(optimizer_remark(r, "tapegrad", *r.tapegrad_phases, "LibTorch", r.libtorch_phases));
    if (r.libtorch_phases && optimizer_dominates(*r.libtorch_phases, r.tapegrad_phases))
      lines.push_back(optimizer_remark(r, "LibTorch", *r.libtorch_phases, "tapegrad", r.tapegrad_phases));
  }
  return lines;
}

namespace {

nlohmann::json phases_json(const StepPhases& p) {
  return {{"forward_ms", p.forward_ms},
          {"backward_ms", p.backward_ms},
          {"optimizer_ms", p.optimizer_ms},
          {"sum_ms", p.total_ms()},
          {"forward_share", phase_share(p, p.forward_ms)},
          {"backward_share", phase_share(p, p.backward_ms)},
          {"optimizer_share", phase_share(p, p.optimizer_ms)}};
}

}  // namespace

void write_json(const CompareReport& report, const std::string& path) {
  using nlohmann::json;
  json doc;
  doc["system"] = {{"cpu", report.system.cpu_model},   {"logical_cpus", report.system.logical_cpus},
                   {"blas", report.system.blas},       {"mapped_blas", report.system.loaded_blas},
                   {"threads", report.system.threads}, {"omp_env", report.system.omp_env}};
  doc["device"] = report.device;
  doc["libtorch"] = report.libtorch;
  doc["sides"] = report.sides;
  const bool inference = report.mode == CompareMode::Inference;
  doc["mode"] = mode_name(report.mode);
  doc["peak_rss_mib"] = report.peak_rss_mib;
  if (inference) {
    doc["timing"] =
        "median time of one forward (the model's logits, no loss) over alternating blocks of forwards, each side "
        "in its inference mode with the model in eval(), after 2 warm-up forwards; steady clock, device "
        "synchronised at block ends";
    doc["gflops"] =
        "GEMM multiply-adds x 2 of the forward alone per example (elementwise work left out; gemm_flops_per_example, "
        "that of the pool's median batch, whose real steps a char_lstm example counts) x batch / median forward "
        "time; percent_of_ceiling divides tapegrad's by sgemm_ceiling.gflops, the faster of the two paths";
    doc["output_tolerance"] = kOutputTolerance;
    doc["agree_rule"] =
        "outputs_agree: max |tapegrad - libtorch| <= output_tolerance * max(1, max |libtorch|) over the outputs "
        "of every batch of the pool, computed before and after the timed forwards";
  } else {
    doc["check_step"] = kCheckStep;
    doc["timing"] =
        "median per-step time over alternating blocks of whole training steps (forward, cross-entropy, "
        "backward, Adam), after 2 warm-up steps; steady clock, device synchronised at block ends";
    doc["gflops"] =
        "GEMM multiply-adds x 2 of forward and backward per example (elementwise work left out; "
        "gemm_flops_per_example, that of the pool's median batch, whose real steps a char_lstm example counts) x "
        "batch / median step time; percent_of_ceiling divides tapegrad's by sgemm_ceiling.gflops, the faster of the "
        "two paths";
    doc["phase_timing"] =
        "tapegrad_phases, libtorch_phases: after the timing of whole steps, phase_steps more steps per side in "
        "alternating blocks (ABBA), the same calls with a steady clock read after forward + cross-entropy, "
        "gradients to none + backward, and the Adam step (device synchronised before each read); each phase's "
        "median over the blocks of its mean per step, and its share of the three medians' sum; "
        "optimizer_floor_ms: Adam's reads and writes alone over the model's parameters on the CPU, one addition "
        "each, on the same threads (common/adam_floor.h), the least any Adam step takes there once the parameters, "
        "gradients and moments outgrow the caches";
    doc["optimizer_remark_rule"] =
        "phase_remarks names a side whose optimizer_share exceeds optimizer_remark_share and the other side's "
        "by optimizer_remark_margin (or whose other side has no split)";
    doc["optimizer_remark_share"] = kOptimizerRemarkShare;
    doc["optimizer_remark_margin"] = kOptimizerRemarkMargin;
    doc["phase_remarks"] = phase_remarks(report);
  }
  doc["core_exchange"] =
      "core_exchange_ns_before/after: median round trip of a value between OpenMP threads 0 and 1 just before "
      "and after the row's timing; on a virtual machine it tells whether the two vCPUs shared a last-level "
      "cache (50-120 ns on the machine of docs/benchmarks.md) or not (470-560 ns there), which changed small-batch "
      "steps by 10-50%";
  if (report.ceiling) {
    const SgemmCeiling& c = *report.ceiling;
    doc["sgemm_ceiling"] = {{"n", c.n},
                            {"calls", c.calls},
                            {"readings", c.readings},
                            {"threads", c.threads},
                            {"openblas_gflops", c.openblas_gflops},
                            {"tapegrad_matmul_gflops", c.tapegrad_gflops},
                            {"tapegrad_bf16_matmul_gflops", c.tapegrad_bf16_gflops},
                            {"tapegrad_bf16_operands_matmul_gflops", c.tapegrad_bf16_operands_gflops},
                            {"gflops", c.gflops()}};
  } else {
    doc["sgemm_ceiling"] = nullptr;
  }
  for (const CompareRow& r : report.rows) {
    json row = {{"config", r.config},
                {"batch", r.batch},
                {"steps", r.steps},
                {"gemm_flops_per_example", r.gemm_flops_per_example}};
    const bool tg_timed = r.tapegrad.median_ms > 0;
    if (tg_timed) {
      row["tapegrad_ms"] = r.tapegrad.median_ms;
      row["tapegrad_min_ms"] = r.tapegrad.min_ms;
      if (!inference) {
        row["tapegrad_first_loss"] = r.tapegrad.first_loss;
        row["tapegrad_check_loss"] = r.tapegrad.check_loss;
        row["tapegrad_final_loss"] = r.tapegrad.final_loss;
      }
      row["tapegrad_gflops"] = r.tapegrad_gflops();
    }
    if (std::optional<double> p = report.percent_of_ceiling(r)) row["tapegrad_percent_of_ceiling"] = *p;
    if (r.libtorch) {
      row["libtorch_ms"] = r.libtorch->median_ms;
      row["libtorch_min_ms"] = r.libtorch->min_ms;
      if (!inference) {
        row["libtorch_first_loss"] = r.libtorch->first_loss;
        row["libtorch_check_loss"] = r.libtorch->check_loss;
        row["libtorch_final_loss"] = r.libtorch->final_loss;
      }
      row["libtorch_gflops"] = *r.libtorch_gflops();
    }
    if (r.tapegrad_bf16) {
      row["tapegrad_bf16_ms"] = r.tapegrad_bf16->median_ms;
      row["tapegrad_bf16_first_loss"] = r.tapegrad_bf16->first_loss;
      row["tapegrad_bf16_check_loss"] = r.tapegrad_bf16->check_loss;
      if (tg_timed) row["ratio_bf16_over_f32"] = r.tapegrad_bf16->median_ms / r.tapegrad.median_ms;
    }
    if (r.libtorch_bf16) {
      row["libtorch_bf16_ms"] = r.libtorch_bf16->median_ms;
      row["libtorch_bf16_first_loss"] = r.libtorch_bf16->first_loss;
      row["libtorch_bf16_check_loss"] = r.libtorch_bf16->check_loss;
    }
    if (r.libtorch && tg_timed) {
      row["ratio_tapegrad_over_libtorch"] = *r.ratio();
      row["ratio_of_fastest_steps"] = r.tapegrad.min_ms / r.libtorch->min_ms;
      if (!inference) {
        row["loss_rel_diff"] = r.loss_rel_diff();
        row["final_loss_rel_diff"] = r.final_loss_rel_diff();
      }
    }
    if (r.tapegrad_phases) row["tapegrad_phases"] = phases_json(*r.tapegrad_phases);
    if (r.optimizer_floor_ms > 0) row["optimizer_floor_ms"] = r.optimizer_floor_ms;
    if (r.libtorch_phases) row["libtorch_phases"] = phases_json(*r.libtorch_phases);
    if (r.tapegrad_phases || r.libtorch_phases) row["phase_steps"] = r.phase_steps;
    if (r.core_exchange_ns_before > 0) {
      row["core_exchange_ns_before"] = r.core_exchange_ns_before;
      row["core_exchange_ns_after"] = r.core_exchange_ns_after;
    }
    if (r.outputs) {
      row["output_max_abs_diff"] = r.outputs->max_abs_diff;
      row["output_max_abs"] = r.outputs->max_abs_ref;
      row["output_rel_diff"] = r.outputs->rel();
      row["output_elements"] = r.outputs->elements;
      row["outputs_agree"] = r.outputs->agree();
    }
    doc["rows"].push_back(row);
  }
  std::ofstream out(path);
  TG_CHECK(out.good(), "compare: cannot write ", path);
  out << doc.dump(2) << "\n";
}

}  // namespace tapegrad::bench
