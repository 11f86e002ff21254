// Anomaly mode (DetectAnomalyGuard): NaN/Inf in a forward output or a backward gradient throws an
// Error naming the op, the shapes and where in the model it ran; off by default. Also the clear
// errors for empty batches and invalid learning rates.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "support/test_util.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;
using tapegrad::testing::expect_error;

namespace {

// log(x): NaN for the negative inputs a test feeds it.
class LogModule : public nn::UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return log(x); }
  std::string name() const override { return "LogModule"; }
};

Tensor leaf_of(std::vector<float> values) {
  Tensor t = tensor<float>(values);
  t.requires_grad_();
  return t;
}

TEST(Anomaly, OffByDefaultNaNPassesSilently) {
  EXPECT_FALSE(autograd::anomaly_mode_enabled());
  Tensor x = leaf_of({-1.0f, 2.0f});
  Tensor y = sum(log(x));
  EXPECT_TRUE(std::isnan(y.item()));
  y.backward();
  EXPECT_TRUE(x.grad().defined());
}

TEST(Anomaly, ForwardNaNNamesOpShapesAndModulePath) {
  DetectAnomalyGuard guard;
  nn::Sequential model({std::make_shared<nn::ReLU>(), std::make_shared<LogModule>()});
  Tensor x = leaf_of({-1.0f, 0.5f, 2.0f});
  // relu(-1) = 0, log(0) = -Inf.
  expect_error([&] { model.forward(x); }, {"anomaly", "forward of log", "NaN or Inf", "1:LogModule", "[3]"});
}

TEST(Anomaly, BackwardInfNamesNodeAndForwardContext) {
  DetectAnomalyGuard guard;
  Tensor x = leaf_of({0.0f, 4.0f});
  Tensor y = sum(sqrt(x));  // finite forward; d sqrt(x)/dx at 0 is +Inf
  EXPECT_FALSE(std::isnan(y.item()));
  expect_error([&] { y.backward(); }, {"anomaly", "backward of sqrt", "gradient for input 0", "[2]", "top level"});
}

TEST(Anomaly, FiniteTrainingStepIsUnaffected) {
  Generator generator(3);
  nn::Sequential model({std::make_shared<nn::Linear>(4, 8, true, &generator), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(8, 2, true, &generator)});
  Tensor x = randn({16, 4}, TensorOptions(), &generator);
  Tensor y = randint(0, 2, {16}, TensorOptions(kInt64), &generator);
  nn::CrossEntropyLoss loss_fn;
  double without = 0, with = 0;
  {
    Tensor loss = loss_fn(model.forward(x), y);
    loss.backward();
    without = loss.item();
  }
  {
    DetectAnomalyGuard guard;
    Tensor loss = loss_fn(model.forward(x), y);
    loss.backward();
    with = loss.item();
  }
  EXPECT_EQ(without, with);
}

TEST(Anomaly, GuardNestsAndRestores) {
  EXPECT_FALSE(autograd::anomaly_mode_enabled());
  {
    DetectAnomalyGuard on;
    EXPECT_TRUE(autograd::anomaly_mode_enabled());
    {
      DetectAnomalyGuard off(false);
      EXPECT_FALSE(autograd::anomaly_mode_enabled());
    }
    EXPECT_TRUE(autograd::anomaly_mode_enabled());
  }
  EXPECT_FALSE(autograd::anomaly_mode_enabled());
}

TEST(Anomaly, IsPerThread) {
  DetectAnomalyGuard guard;
  bool other_thread_enabled = true;
  std::thread([&] { other_thread_enabled = autograd::anomaly_mode_enabled(); }).join();
  EXPECT_FALSE(other_thread_enabled);
}

TEST(Anomaly, ModuleScopesNest) {
  EXPECT_EQ(autograd::current_module_path(), "");
  autograd::ModuleScope outer("encoder");
  {
    autograd::ModuleScope inner("0:Linear");
    EXPECT_EQ(autograd::current_module_path(), "encoder/0:Linear");
  }
  EXPECT_EQ(autograd::current_module_path(), "encoder");
}

TEST(Anomaly, OpsUnderNoGradAreNotChecked) {
  DetectAnomalyGuard guard;
  NoGradGuard no_grad;
  Tensor y = log(tensor<float>({-1.0f}));
  EXPECT_TRUE(std::isnan(y.item()));
}

TEST(BadNumbers, EmptyBatchIsAClearError) {
  Tensor logits = zeros({0, 3});
  Tensor target = zeros({0}, TensorOptions(kInt64));
  expect_error([&] { cross_entropy(logits, target); }, {"cross_entropy", "empty batch"});
  expect_error([&] { nll_loss(logits, target); }, {"nll_loss", "empty batch"});
  expect_error([&] { mse_loss(zeros({0, 2}), zeros({0, 2})); }, {"mse_loss", "empty", "[0, 2]"});
  // Sum and none stay well defined.
  EXPECT_EQ(cross_entropy(logits, target, CrossEntropyOptions{Reduction::Sum}).item(), 0.0);
}

TEST(BadNumbers, NaNLearningRateIsAClearError) {
  Tensor w = zeros({2});
  w.requires_grad_();
  expect_error([&] { optim::Adam(std::vector<Tensor>{w}, optim::AdamOptions(std::nan(""))); },
               {"learning rate", "nan"});
  expect_error([&] { optim::SGD(std::vector<Tensor>{w}, optim::SGDOptions(std::nan(""))); }, {"learning rate"});
}

}  // namespace
