// Every named configuration builds, has PyTorch's parameter names, and trains: one step on the CPU
// gives a finite loss near ln(10) (random labels over 10 classes) and changes the weights; the same
// step on CUDA agrees when a GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "models/named_configs.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

// A smaller stand-in with the same structure, so the test stays fast for the large configurations.
ModelShape shrunk(const ModelShape& shape) {
  if (shape.kind == ModelKind::Mlp) return shape;
  return ModelShape::lstm(shape.input_size, std::min<int64_t>(shape.hidden_size, 64),
                          std::min<int64_t>(shape.seq_len, 12));
}

}  // namespace

TEST(NamedConfigs, NamesAreTheDocumentedOnes) {
  std::vector<std::string> names;
  for (const NamedConfig& c : named_configs()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mlp_seed", "mlp_fashion", "lstm_row", "lstm_small", "lstm_large"}));
  EXPECT_EQ(named_config("lstm_small").batch_sizes, (std::vector<int64_t>{1, 16, 64, 256}));
  EXPECT_THROW(named_config("lstm_huge"), Error);
}

TEST(NamedConfigs, ParameterNamesMatchPyTorch) {
  std::set<std::string> mlp, lstm;
  for (auto& [name, t] : build_model(named_config("mlp_fashion").shape)->named_parameters()) mlp.insert(name);
  for (auto& [name, t] : build_model(named_config("lstm_row").shape)->named_parameters()) lstm.insert(name);
  EXPECT_EQ(mlp, (std::set<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}));
  EXPECT_EQ(lstm, (std::set<std::string>{"lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0",
                                         "fc.weight", "fc.bias"}));
}

TEST(NamedConfigs, EachTrainsOneStepOnTheCpu) {
  for (const NamedConfig& config : named_configs()) {
    SCOPED_TRACE(config.name);
    ModelShape shape = shrunk(config.shape);
    TrainingRun run(shape, 4, kCPU, /*seed=*/3, config.lr, /*pool=*/2);
    Tensor before = run.model().parameters().front().clone();
    double loss = run.step().item();
    run.synchronize();
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, std::log(10.0), 1.0);
    EXPECT_GT(sum(abs(run.model().parameters().front() - before)).item(), 0.0);
    EXPECT_EQ(run.steps_done(), 1);
  }
}

TEST(NamedConfigs, SameSeedSameLoss) {
  ModelShape shape = shrunk(named_config("lstm_small").shape);
  TrainingRun a(shape, 3, kCPU, 7), b(shape, 3, kCPU, 7);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.step().item(), b.step().item());
}

TEST(NamedConfigs, CudaStepMatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const NamedConfig& config : named_configs()) {
    SCOPED_TRACE(config.name);
    ModelShape shape = shrunk(config.shape);
    TrainingRun cpu(shape, 8, kCPU, 5), gpu(shape, 8, kCUDA, 5);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(cpu.step().item(), gpu.step().item(), 1e-4);
  }
}
