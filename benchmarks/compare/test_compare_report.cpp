// The comparison's report pieces that need no LibTorch: --mode parsing, inference mode's agree rule
// (with planted differences it must catch), the table and JSON each mode writes, the step split and
// its note on a large optimiser share, and that a phased step trains exactly as a plain one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/adam_floor.h"
#include "compare_report.h"
#include "models/named_configs.h"
#include "sgemm_ceiling.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

OutputDifference difference(const std::vector<float>& a, const std::vector<float>& b) {
  OutputDifference d;
  d.add(a.data(), b.data(), static_cast<int64_t>(a.size()));
  return d;
}

// A row of each kind: both sides timed, with outputs that agree or that do not.
CompareRow inference_row(const std::string& config, int64_t batch, double diff) {
  CompareRow r;
  r.config = config;
  r.batch = batch;
  r.steps = 42;
  r.gemm_flops_per_example = named_config(config).shape.gemm_forward_flops_per_example();
  r.tapegrad.median_ms = 0.5, r.tapegrad.min_ms = 0.4;
  r.libtorch = SideResult{};
  r.libtorch->median_ms = 1.0, r.libtorch->min_ms = 0.8;
  r.outputs = OutputDifference{diff, 2.0, 640};
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

// The ceiling read before and after the rows: the better of each field counts, the calls add up.
TEST(SgemmCeiling, BestOfTwoReadingsKeepsEachFieldsBetter) {
  SgemmCeiling before, after;
  before.n = after.n = 2048;
  before.calls = after.calls = 5;
  before.openblas_gflops = 250, after.openblas_gflops = 260;
  before.tapegrad_gflops = 440, after.tapegrad_gflops = 366;
  before.tapegrad_bf16_gflops = 900, after.tapegrad_bf16_gflops = 950;
  const SgemmCeiling c = best_of(before, after);
  EXPECT_EQ(c.openblas_gflops, 260);
  EXPECT_EQ(c.tapegrad_gflops, 440);
  EXPECT_EQ(c.tapegrad_bf16_gflops, 950);
  EXPECT_EQ(c.gflops(), 440);
  EXPECT_EQ(c.calls, 10);
  EXPECT_EQ(c.readings, 2);
  EXPECT_EQ(best_of(after, before).gflops(), 440) << "either order";
}

TEST(CompareMode, ParsesTrainAndInference) {
  EXPECT_EQ(parse_mode("train"), CompareMode::Train);
  EXPECT_EQ(parse_mode("inference"), CompareMode::Inference);
  EXPECT_STREQ(mode_name(CompareMode::Inference), "inference");
  EXPECT_STREQ(mode_name(CompareMode::Train), "train");
  for (const char* bad : {"", "Inference", "eval", "infer", "train,inference"}) {
    SCOPED_TRACE(bad);
    try {
      parse_mode(bad);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train or inference"), std::string::npos) << e.what();
    }
  }
}

// max |a - b| <= 1e-5 * max(1, max |b|): relative above 1, absolute below, at the boundary exactly.
TEST(OutputAgreeRule, IsTheDocumentedBound) {
  EXPECT_TRUE((OutputDifference{3e-5, 3.0, 1}).agree());
  EXPECT_FALSE((OutputDifference{3.1e-5, 3.0, 1}).agree());
  EXPECT_TRUE((OutputDifference{1e-5, 0.2, 1}).agree());  // small logits: an absolute 1e-5
  EXPECT_FALSE((OutputDifference{1.1e-5, 0.2, 1}).agree());
  EXPECT_DOUBLE_EQ((OutputDifference{6e-5, 3.0, 1}).rel(), 2e-5);
  EXPECT_DOUBLE_EQ((OutputDifference{6e-5, 0.5, 1}).rel(), 6e-5);
}

TEST(OutputAgreeRule, AddKeepsTheMaxima) {
  OutputDifference d = difference({1.0f, -4.0f, 2.0f}, {1.0f, -4.0f, 2.5f});
  EXPECT_DOUBLE_EQ(d.max_abs_diff, 0.5);
  EXPECT_DOUBLE_EQ(d.max_abs_ref, 4.0);
  EXPECT_EQ(d.elements, 3);
  const float more_a[] = {10.0f}, more_b[] = {10.25f};
  d.add(more_a, more_b, 1);  // a second batch: the maxima run over both
  EXPECT_DOUBLE_EQ(d.max_abs_diff, 0.5);
  EXPECT_DOUBLE_EQ(d.max_abs_ref, 10.25);
  EXPECT_EQ(d.elements, 4);
}

// Real logits (mlp_seed at batch 1, under InferenceMode) against themselves agree; the same with one
// element moved by 1e-4 of the largest, or one NaN, must not (the negative controls).
TEST(OutputAgreeRule, PerturbedLogitsDisagree) {
  const ModelShape& shape = named_config("mlp_seed").shape;
  Generator init(1), data(2);
  auto model = build_model(shape, &init);
  model->eval();
  const Batch b = make_batches(shape, 1, 1, &data).front();
  std::vector<float> logits;
  {
    InferenceMode inference;
    logits = model_output(shape, *model, b).contiguous().tolist<float>();
  }
  ASSERT_EQ(logits.size(), 10u);
  OutputDifference same = difference(logits, logits);
  EXPECT_TRUE(same.agree());
  EXPECT_EQ(same.max_abs_diff, 0.0);

  double largest = 0;
  for (float v : logits) largest = std::max(largest, std::abs(static_cast<double>(v)));
  std::vector<float> perturbed = logits;
  perturbed[3] += static_cast<float>(1e-4 * std::max(1.0, largest));
  OutputDifference off = difference(perturbed, logits);
  EXPECT_FALSE(off.agree());
  EXPECT_NEAR(off.rel(), 1e-4, 1e-6);

  std::vector<float> with_nan = logits;
  with_nan[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(difference(with_nan, logits).agree());
  with_nan = logits;
  with_nan[0] = std::numeric_limits<float>::quiet_NaN();  // first, then finite differences after it
  EXPECT_FALSE(difference(with_nan, logits).agree());
}

TEST(CompareReportInference, TableShowsForwardsAndVerdicts) {
  CompareReport report;
  report.mode = CompareMode::Inference;
  report.rows.push_back(inference_row("mlp_seed", 1, 1e-6));
  report.rows.push_back(inference_row("lstm_small", 1, 1e-3));  // 1e-3 / max(1, 2) = 5e-4
  CompareRow alone = inference_row("lstm_small", 16, 0);
  alone.libtorch.reset(), alone.outputs.reset();  // tapegrad timed alone (no LibTorch, or on a GPU)
  report.rows.push_back(alone);
  const std::string table = format_table(report);
  EXPECT_NE(table.find("max|tg-lt|"), std::string::npos) << table;
  EXPECT_EQ(table.find("loss1"), std::string::npos) << table;
  std::istringstream lines(table);
  std::string header, agree, mismatch, tg_alone;
  std::getline(lines, header), std::getline(lines, agree), std::getline(lines, mismatch), std::getline(lines, tg_alone);
  EXPECT_NE(agree.find("0.50"), std::string::npos) << agree;  // tg/lt
  EXPECT_EQ(agree.substr(agree.size() - 5), "agree") << agree;
  EXPECT_NE(mismatch.find("MISMATCH rel 5.00e-04"), std::string::npos) << mismatch;
  EXPECT_NE(tg_alone.find("0.5000"), std::string::npos) << tg_alone;
  EXPECT_EQ(tg_alone.back(), '-') << tg_alone;  // nothing compared, no verdict
  EXPECT_TRUE(report.rows[0].outputs_agree());
  EXPECT_FALSE(report.rows[1].outputs_agree());
  EXPECT_TRUE(report.rows[2].outputs_agree());
}

// GF/s of an inference row are the forward's FLOPs over the forward's time.
TEST(CompareReportInference, GflopsAreForwardOnly) {
  const CompareRow r = inference_row("mlp_seed", 1, 0);
  EXPECT_DOUBLE_EQ(r.tapegrad_gflops(), 2.0 * (1000 * 512 + 512 * 10) / 0.5e-3 * 1e-9);
  EXPECT_DOUBLE_EQ(*r.libtorch_gflops(), 2.0 * (1000 * 512 + 512 * 10) / 1e-3 * 1e-9);
}

TEST(CompareReportInference, JsonHasModeAndOutputFields) {
  const std::string dir = testing::TempDir();
  CompareReport report;
  report.mode = CompareMode::Inference;
  report.rows.push_back(inference_row("mlp_seed", 1, 1e-6));
  report.rows.push_back(inference_row("lstm_small", 1, 1e-3));
  write_json(report, dir + "/inference.json");
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir + "/inference.json"));
  EXPECT_EQ(doc["mode"], "inference");
  EXPECT_EQ(doc["output_tolerance"], kOutputTolerance);
  EXPECT_FALSE(doc.contains("check_step"));
  const nlohmann::json& good = doc["rows"][0];
  EXPECT_EQ(good["outputs_agree"], true);
  EXPECT_EQ(good["output_max_abs_diff"], 1e-6);
  EXPECT_EQ(good["output_max_abs"], 2.0);
  EXPECT_EQ(good["output_elements"], 640);
  EXPECT_EQ(good["ratio_tapegrad_over_libtorch"], 0.5);
  for (const char* key : {"tapegrad_first_loss", "libtorch_final_loss", "loss_rel_diff"})
    EXPECT_FALSE(good.contains(key)) << key;
  EXPECT_EQ(doc["rows"][1]["outputs_agree"], false);
  EXPECT_DOUBLE_EQ(doc["rows"][1]["output_rel_diff"].get<double>(), 5e-4);
}

// Train mode keeps its table and its JSON (plus the mode), with no output fields.
TEST(CompareReportTrain, KeepsLossesAndHasNoOutputs) {
  const std::string dir = testing::TempDir();
  CompareReport report;
  CompareRow r;
  r.config = "mlp_seed", r.batch = 64, r.steps = 10;
  r.gemm_flops_per_example = named_config("mlp_seed").shape.gemm_flops_per_example();
  r.tapegrad = SideResult{1.0, 0.9, 2.3, 2.2, 2.1};
  r.libtorch = SideResult{1.1, 1.0, 2.3, 2.2, 2.1};
  report.rows.push_back(r);
  const std::string table = format_table(report);
  EXPECT_NE(table.find("loss1 tg"), std::string::npos) << table;
  EXPECT_EQ(table.find("max|tg-lt|"), std::string::npos) << table;
  EXPECT_NE(table.find("agree"), std::string::npos) << table;
  write_json(report, dir + "/train.json");
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir + "/train.json"));
  EXPECT_EQ(doc["mode"], "train");
  EXPECT_EQ(doc["check_step"], kCheckStep);
  EXPECT_TRUE(doc["rows"][0].contains("tapegrad_first_loss"));
  EXPECT_TRUE(doc["rows"][0].contains("loss_rel_diff"));
  EXPECT_FALSE(doc["rows"][0].contains("outputs_agree"));
}

// A row's threads 0-1 round trip goes into the JSON only when it was read (a single CPU reads none):
// a zero must not pass for a measured round trip.
TEST(CompareReportTrain, CoreExchangeFieldsOnlyWhenRead) {
  const std::string dir = testing::TempDir();
  CompareReport report;
  CompareRow r;
  r.config = "mlp_seed", r.batch = 64, r.steps = 10;
  r.tapegrad = SideResult{1.0, 0.9, 2.3, 2.2, 2.1};
  report.rows.push_back(r);  // no reading
  r.core_exchange_ns_before = 95.0, r.core_exchange_ns_after = 480.0;
  report.rows.push_back(r);
  write_json(report, dir + "/exchange.json");
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir + "/exchange.json"));
  EXPECT_FALSE(doc["rows"][0].contains("core_exchange_ns_before"));
  EXPECT_FALSE(doc["rows"][0].contains("core_exchange_ns_after"));
  ASSERT_TRUE(doc["rows"][1].contains("core_exchange_ns_before"));
  EXPECT_EQ(doc["rows"][1]["core_exchange_ns_before"], 95.0);
  EXPECT_EQ(doc["rows"][1]["core_exchange_ns_after"], 480.0);
}

namespace {

// A training row with each side's step split as given (absent: that side has no split).
CompareRow split_row(const std::string& config, int64_t batch, std::optional<StepPhases> tg,
                     std::optional<StepPhases> lt) {
  CompareRow r;
  r.config = config, r.batch = batch, r.steps = 10, r.phase_steps = 8;
  r.tapegrad = SideResult{1.0, 0.9, 2.3, 2.2, 2.1};
  if (lt) r.libtorch = SideResult{1.5, 1.4, 2.3, 2.2, 2.1};
  r.tapegrad_phases = tg, r.libtorch_phases = lt;
  return r;
}

CompareReport report_of(std::vector<CompareRow> rows) {
  CompareReport report;
  report.rows = std::move(rows);
  return report;
}

// The line of `table` that starts with `config` and holds `batch` as its second field.
std::string row_line(const std::string& table, const std::string& config, int64_t batch) {
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name, b;
    fields >> name >> b;
    if (name == config && b == std::to_string(batch)) return line;
  }
  return "";
}

}  // namespace

// Each phase's median is taken on its own: the slow forward of one block and the slow Adam of another
// do not make one slow step.
TEST(CompareReportPhases, MedianIsPerPhase) {
  const StepPhases m = median_phases({{5.0, 1.0, 1.0}, {1.0, 2.0, 9.0}, {2.0, 3.0, 2.0}});
  EXPECT_DOUBLE_EQ(m.forward_ms, 2.0);
  EXPECT_DOUBLE_EQ(m.backward_ms, 2.0);
  EXPECT_DOUBLE_EQ(m.optimizer_ms, 2.0);
  EXPECT_DOUBLE_EQ(m.total_ms(), 6.0);
  EXPECT_DOUBLE_EQ(median_phases({}).total_ms(), 0.0);
  EXPECT_DOUBLE_EQ(phase_share({1.0, 2.0, 1.0}, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(phase_share({}, 0.0), 0.0);  // nothing measured: no share, not a NaN
}

TEST(CompareReportPhases, TableShowsEachSidesSplit) {
  CompareReport report = report_of({split_row("mlp_seed", 64, StepPhases{0.2, 0.6, 0.2}, StepPhases{0.3, 0.5, 1.2}),
                                    split_row("lstm_small", 1, StepPhases{0.25, 0.5, 0.25}, std::nullopt)});
  report.rows[0].optimizer_floor_ms = 0.171;
  const std::string table = format_phase_table(report);
  EXPECT_NE(table.find("opt floor"), std::string::npos) << table;
  EXPECT_NE(table.find("tg fwd/bwd/opt %"), std::string::npos) << table;
  EXPECT_NE(table.find("lt fwd/bwd/opt %"), std::string::npos) << table;
  const std::string both = row_line(table, "mlp_seed", 64);
  for (const char* cell : {"0.200", "0.600", "1.000", "20/60/20", "1.200", "2.000", "15/25/60"})
    EXPECT_NE(both.find(cell), std::string::npos) << cell << " in " << both;
  std::istringstream both_fields(both);
  const std::vector<std::string> both_cells{std::istream_iterator<std::string>(both_fields), {}};
  ASSERT_EQ(both_cells.size(), 14u) << both;
  EXPECT_EQ(both_cells[4], "0.200");  // tapegrad's Adam, then its floor beside it
  EXPECT_EQ(both_cells[5], "0.171");
  const std::string alone = row_line(table, "lstm_small", 1);  // without LibTorch: tapegrad's split alone
  EXPECT_NE(alone.find("25/50/25"), std::string::npos) << alone;
  std::istringstream fields(alone);
  std::vector<std::string> cells{std::istream_iterator<std::string>(fields), {}};
  ASSERT_EQ(cells.size(), 14u) << alone;
  EXPECT_EQ(cells[5], "-") << alone;  // Adam's memory floor, not measured
  for (size_t i = 8; i < 13; ++i) EXPECT_EQ(cells[i], "-") << alone;
  EXPECT_EQ(cells[13], "8");  // phased steps per side

  EXPECT_EQ(format_phase_table(report_of({split_row("mlp_seed", 64, std::nullopt, std::nullopt)})), "");
  report.mode = CompareMode::Inference;  // forwards have no backward or optimiser
  EXPECT_EQ(format_phase_table(report), "");
  EXPECT_TRUE(phase_remarks(report).empty());
}

// The remark names the side whose Adam takes the large share, whichever side it is.
TEST(CompareReportPhases, RemarkNamesLibTorchsAdam) {
  const CompareReport report =
      report_of({split_row("lstm_small", 1, StepPhases{0.3, 0.6, 0.1}, StepPhases{0.2, 0.3, 1.0})});
  const std::vector<std::string> remarks = phase_remarks(report);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_NE(remarks[0].find("lstm_small:1"), std::string::npos) << remarks[0];
  EXPECT_NE(remarks[0].find("Adam takes 67% of LibTorch's step (1.000 of 1.500 ms)"), std::string::npos) << remarks[0];
  EXPECT_NE(remarks[0].find("tapegrad's Adam 10%"), std::string::npos) << remarks[0];
}

TEST(CompareReportPhases, RemarkNamesTapegradsAdam) {
  const CompareReport report =
      report_of({split_row("mlp_seed", 1, StepPhases{0.1, 0.1, 0.3}, StepPhases{0.3, 0.5, 0.2})});
  const std::vector<std::string> remarks = phase_remarks(report);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_NE(remarks[0].find("Adam takes 60% of tapegrad's step"), std::string::npos) << remarks[0];
  EXPECT_NE(remarks[0].find("LibTorch's Adam 20%"), std::string::npos) << remarks[0];
}

// Negative controls: balanced shares, both sides' Adam large alike, a margin just short of the rule,
// and a share of exactly 40%, give no remark.
TEST(CompareReportPhases, NoRemarkWhenSharesAreBalanced) {
  const CompareReport report = report_of({
      split_row("mlp_seed", 64, StepPhases{0.3, 0.4, 0.3}, StepPhases{0.25, 0.4, 0.35}),
      split_row("mlp_seed", 1, StepPhases{0.25, 0.25, 0.5}, StepPhases{0.2, 0.25, 0.55}),
      split_row("lstm_small", 1, StepPhases{0.3, 0.4, 0.3}, StepPhases{0.2, 0.36, 0.44}),
      split_row("lstm_small", 64, StepPhases{0.3, 0.3, 0.4}, std::nullopt),
  });
  const std::vector<std::string> remarks = phase_remarks(report);
  EXPECT_TRUE(remarks.empty()) << remarks.front();
}

// Adam's memory floor: the pass updates the three written streams by the gradient and leaves the
// gradient alone, on one thread and on two (each element exactly once), and on one when asked for
// none; no parameters (or a negative count), no time.
TEST(AdamFloor, PassTouchesEachElementOnceAndTimesAPass) {
  for (int threads : {1, 2}) {
    std::vector<float> p(1001, 1.0f), g(1001), m(1001, 2.0f), v(1001, 3.0f);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
    adam_streams_pass(p.data(), g.data(), m.data(), v.data(), 1001, threads);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_EQ(p[i], 1.0f + static_cast<float>(i)) << i;
      ASSERT_EQ(m[i], 2.0f + static_cast<float>(i)) << i;
      ASSERT_EQ(v[i], 3.0f + static_cast<float>(i)) << i;
      ASSERT_EQ(g[i], static_cast<float>(i)) << i;
    }
  }
  std::vector<float> p(8, 1.0f), g(8, 1.0f), m(8), v(8);
  adam_streams_pass(p.data(), g.data(), m.data(), v.data(), 8, 0);  // no threads asked for: one
  EXPECT_EQ(p[7], 2.0f);
  EXPECT_GT(adam_memory_floor_ms(1 << 16, 2, 0.0), 0.0);
  EXPECT_GT(adam_memory_floor_ms(1 << 10, 0, 0.0), 0.0);
  EXPECT_EQ(adam_memory_floor_ms(0, 2), 0.0);
  EXPECT_EQ(adam_memory_floor_ms(-5, 2), 0.0);
  AdamStreams none(-3);  // a negative count holds nothing and passes over nothing
  EXPECT_EQ(none.size(), 0);
  none.pass(2);
}

// Timed alone (no LibTorch, or on a GPU), tapegrad's own large share is still named.
TEST(CompareReportPhases, RemarkOnOneSideAlone) {
  const std::vector<std::string> remarks =
      phase_remarks(report_of({split_row("mlp_seed", 1, StepPhases{0.1, 0.1, 0.2}, std::nullopt)}));
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_NE(remarks[0].find("Adam takes 50% of tapegrad's step"), std::string::npos) << remarks[0];
  EXPECT_EQ(remarks[0].find("LibTorch"), std::string::npos) << remarks[0];
}

TEST(CompareReportPhases, JsonHasEachSidesSplitAndTheRemarks) {
  const std::string dir = testing::TempDir();
  CompareReport report = report_of({split_row("lstm_small", 1, StepPhases{0.3, 0.6, 0.1}, StepPhases{0.2, 0.3, 1.0}),
                                    split_row("mlp_seed", 64, std::nullopt, std::nullopt)});
  report.rows[0].optimizer_floor_ms = 0.042;
  write_json(report, dir + "/phases.json");
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir + "/phases.json"));
  EXPECT_TRUE(doc.contains("phase_timing"));
  EXPECT_DOUBLE_EQ(doc["rows"][0]["optimizer_floor_ms"].get<double>(), 0.042);
  EXPECT_FALSE(doc["rows"][1].contains("optimizer_floor_ms"));  // not measured, not written
  EXPECT_EQ(doc["optimizer_remark_share"], kOptimizerRemarkShare);
  EXPECT_EQ(doc["optimizer_remark_margin"], kOptimizerRemarkMargin);
  ASSERT_EQ(doc["phase_remarks"].size(), 1u);
  EXPECT_EQ(doc["phase_remarks"][0], phase_remarks(report)[0]);
  const nlohmann::json& row = doc["rows"][0];
  EXPECT_EQ(row["phase_steps"], 8);
  const nlohmann::json& lt = row["libtorch_phases"];
  EXPECT_DOUBLE_EQ(lt["forward_ms"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(lt["backward_ms"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(lt["optimizer_ms"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(lt["sum_ms"].get<double>(), 1.5);
  EXPECT_NEAR(lt["optimizer_share"].get<double>(), 2.0 / 3.0, 1e-12);
  for (const char* side : {"tapegrad_phases", "libtorch_phases"}) {
    const nlohmann::json& p = row[side];
    EXPECT_NEAR(
        p["forward_share"].get<double>() + p["backward_share"].get<double>() + p["optimizer_share"].get<double>(), 1.0,
        1e-12)
        << side;
  }
  for (const char* key : {"tapegrad_phases", "libtorch_phases", "phase_steps"})
    EXPECT_FALSE(doc["rows"][1].contains(key)) << key;  // no split measured, nothing written

  report.mode = CompareMode::Inference;
  write_json(report, dir + "/phases_inference.json");
  const nlohmann::json inference = nlohmann::json::parse(slurp(dir + "/phases_inference.json"));
  EXPECT_FALSE(inference.contains("phase_timing"));
  EXPECT_FALSE(inference.contains("phase_remarks"));
}

// The phased step runs the step's work: two runs from the same weights, one stepped plainly and one
// through phased_step, give bit-identical losses and weights (an LSTM and an MLP), and each phase of
// every phased step was timed.
TEST(TrainingRunPhases, PhasedStepsTrainLikeSteps) {
  for (const char* name : {"mlp_seed", "lstm_small"}) {
    SCOPED_TRACE(name);
    const ModelShape& shape = named_config(name).shape;
    TrainingRun plain(shape, 2, kCPU, /*seed=*/3), phased(shape, 2, kCPU, /*seed=*/3);
    for (int i = 0; i < 3; ++i) {
      StepPhases phases{-1, -1, -1};
      const float a = plain.step().item<float>();
      const float b = phased.phased_step(&phases).item<float>();
      EXPECT_EQ(a, b) << "step " << i;
      EXPECT_GE(phases.forward_ms, 0);
      EXPECT_GE(phases.backward_ms, 0);
      EXPECT_GE(phases.optimizer_ms, 0);
    }
    EXPECT_EQ(plain.steps_done(), phased.steps_done());
    const StateDict after_plain = plain.model().state_dict(), after_phased = phased.model().state_dict();
    ASSERT_EQ(after_plain.size(), after_phased.size());
    for (size_t i = 0; i < after_plain.size(); ++i)
      EXPECT_EQ(after_plain[i].second.tolist<float>(), after_phased[i].second.tolist<float>()) << after_plain[i].first;
  }
}
