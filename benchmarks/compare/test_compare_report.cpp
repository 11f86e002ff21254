// The comparison's report pieces that need no LibTorch: --mode parsing, inference mode's agree rule
// (with planted differences it must catch), and the table and JSON each mode writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compare_report.h"
#include "models/named_configs.h"

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
