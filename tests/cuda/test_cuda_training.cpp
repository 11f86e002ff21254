// End-to-end training on the GPU through the public API only: the same models, data and initial
// weights trained on the CPU and on CUDA give the same losses step by step; module.to(kCUDA) moves
// parameters in place so an optimiser made earlier follows them; a CUDA state dict round-trips
// through safetensors into a CPU model; mixing devices in one op is a clear error. Every case
// skips where no GPU is present.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "support/gpu.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

constexpr int kSteps = 50;
// float32 on both devices; cuBLAS/cuDNN sum in another order than OpenBLAS, and Adam divides by
// sqrt(v), so a few ulps per step may grow a little over 50 steps, but stay far below this.
constexpr double kLossRelTol = 1e-3;

struct Batch {
  Tensor x, y;
};

// A few fixed batches on the CPU; step k uses batch k % size, so both devices see the same sequence.
// The class of an example is the largest of a fixed random projection of its features, so the
// task is learnable and the loss must fall.
std::vector<Batch> mlp_batches(uint64_t seed) {
  Generator g(seed);
  Tensor projection = randn({20, 5}, {}, &g);
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({64, 20}, {}, &g);
    batches.push_back({x, argmax(matmul(x, projection), 1)});
  }
  return batches;
}

// Sequences [B=16, T=12, I=8] (batch first); the class is the largest of the first four features
// summed over time.
std::vector<Batch> lstm_batches(uint64_t seed) {
  Generator g(seed);
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({16, 12, 8}, {}, &g);
    batches.push_back({x, argmax(sum(x, {1}).narrow(1, 0, 4), 1)});
  }
  return batches;
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  Generator g(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(20, 32, true, &g), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 5, true, &g)});
}

// LSTM(8, 16) read batch first, then a Linear head on the last hidden state.
class LstmClassifier : public nn::UnaryModule {
 public:
  explicit LstmClassifier(uint64_t seed) : generator_(seed) {
    lstm_ =
        register_module("lstm", std::make_shared<nn::LSTM>(8, 16, nn::LSTMOptions().batch_first(true), &generator_));
    head_ = register_module("head", std::make_shared<nn::Linear>(16, 4, true, &generator_));
  }
  Tensor forward(const Tensor& x) override { return head_->forward(lstm_->forward(x).h_n.select(0, 0)); }
  std::string name() const override { return "LstmClassifier"; }

 private:
  Generator generator_;
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};

// Trains `model` (already on `device`) with Adam and cross-entropy; returns the loss of every step.
std::vector<double> train(nn::UnaryModule& model, const std::vector<Batch>& batches, Device device, double lr) {
  optim::Adam opt(model.parameters(), optim::AdamOptions(lr));
  nn::CrossEntropyLoss loss_fn;
  std::vector<Batch> on_device;
  for (const Batch& b : batches) on_device.push_back({b.x.to(device), b.y.to(device)});
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    const Batch& b = on_device[step % on_device.size()];
    Tensor loss = loss_fn(model.forward(b.x), b.y);
    EXPECT_EQ(loss.device(), device);
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}

void expect_same_state(const nn::Module& a, const nn::Module& b, double tol) {
  StateDict sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    testing::expect_close(sa[i].second.cpu(), sb[i].second.cpu(), tol);
  }
}

void expect_losses_agree(const std::vector<double>& cpu, const std::vector<double>& gpu) {
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t k = 0; k < cpu.size(); ++k) {
    ASSERT_TRUE(std::isfinite(gpu[k])) << "step " << k;
    double scale = std::max(std::abs(cpu[k]), 1e-3);
    EXPECT_LE(std::abs(cpu[k] - gpu[k]) / scale, kLossRelTol)
        << "step " << k << ": cpu loss " << cpu[k] << ", cuda loss " << gpu[k];
  }
  // Training works on both: the last losses are well below the first.
  EXPECT_LT(gpu.back(), 0.8 * gpu.front());
  EXPECT_LT(cpu.back(), 0.8 * cpu.front());
}

TEST(CudaTraining, MlpLossesMatchCpuStepByStep) {
  SKIP_WITHOUT_GPU();
  std::vector<Batch> batches = mlp_batches(11);
  auto cpu_model = make_mlp(3);
  auto gpu_model = make_mlp(3);
  expect_same_state(*cpu_model, *gpu_model, 0);
  gpu_model->to(kCUDA);
  std::vector<double> cpu = train(*cpu_model, batches, kCPU, 1e-2);
  std::vector<double> gpu = train(*gpu_model, batches, kCUDA, 1e-2);
  expect_losses_agree(cpu, gpu);
  // Loose: a weight whose gradient is near zero can take Adam steps of about lr either way.
  expect_same_state(*cpu_model, *gpu_model, 1e-2);
}

TEST(CudaTraining, LstmLossesMatchCpuStepByStep) {
  SKIP_WITHOUT_GPU();
  std::vector<Batch> batches = lstm_batches(12);
  LstmClassifier cpu_model(5), gpu_model(5);
  expect_same_state(cpu_model, gpu_model, 0);
  gpu_model.to(kCUDA);
  std::vector<double> cpu = train(cpu_model, batches, kCPU, 1e-2);
  std::vector<double> gpu = train(gpu_model, batches, kCUDA, 1e-2);
  expect_losses_agree(cpu, gpu);
  expect_same_state(cpu_model, gpu_model, 1e-2);
}

TEST(CudaTraining, LoadStateDictCopiesCpuWeightsIntoCudaModel) {
  SKIP_WITHOUT_GPU();
  auto cpu_model = make_mlp(21);
  auto gpu_model = make_mlp(22);  // other weights, replaced below
  gpu_model->to(kCUDA);
  gpu_model->load_state_dict(cpu_model->state_dict());
  for (const Tensor& p : gpu_model->parameters()) EXPECT_TRUE(p.device().is_cuda());
  expect_same_state(*cpu_model, *gpu_model, 0);
}

TEST(CudaTraining, ModuleToMovesParametersAndOptimiserFollows) {
  SKIP_WITHOUT_GPU();
  auto model = make_mlp(4);
  StateDict before;
  for (auto& [name, t] : model->state_dict()) before.emplace_back(name, t.clone());
  // The optimiser holds the parameter handles from before the move; to() converts in place.
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  model->to(kCUDA);
  for (auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(p.device().is_cuda()) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
    EXPECT_TRUE(p.is_leaf()) << name;
  }
  for (size_t i = 0; i < before.size(); ++i)
    testing::expect_close(model->state_dict()[i].second.cpu(), before[i].second, 0);

  Batch b = mlp_batches(5)[0];
  Tensor loss = nn::CrossEntropyLoss()(model->forward(b.x.to(kCUDA)), b.y.to(kCUDA));
  opt.zero_grad();
  loss.backward();
  for (const Tensor& p : opt.params()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(p.grad().device().is_cuda());
  }
  opt.step();
  StateDict after = model->state_dict();
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(after[i].second.device().is_cuda());
    // Adam's first step moves every weight with a nonzero gradient by about lr.
    double moved = max(abs(sub(after[i].second.cpu(), before[i].second))).item();
    EXPECT_GT(moved, 1e-3) << after[i].first;
    EXPECT_LT(moved, 2e-2) << after[i].first;
  }
}

TEST(CudaTraining, CudaStateDictSavesAndLoadsIntoCpuModel) {
  SKIP_WITHOUT_GPU();
  LstmClassifier gpu_model(6), cpu_model(7);
  gpu_model.to(kCUDA);
  train(gpu_model, lstm_batches(8), kCUDA, 1e-2);  // weights that differ from any initialisation
  std::string path = ::testing::TempDir() + "tapegrad_cuda_training.safetensors";
  save_safetensors(path, gpu_model.state_dict());

  cpu_model.load_state_dict(load_safetensors(path));
  for (const Tensor& p : cpu_model.parameters()) EXPECT_TRUE(p.device().is_cpu());
  expect_same_state(gpu_model, cpu_model, 0);

  // And straight back onto the GPU.
  StateDict on_gpu = load_safetensors(path, kCUDA);
  for (auto& [name, t] : on_gpu) EXPECT_TRUE(t.device().is_cuda()) << name;
  LstmClassifier reloaded(9);
  reloaded.to(kCUDA);
  reloaded.load_state_dict(on_gpu);
  expect_same_state(gpu_model, reloaded, 0);

  // The same input gives the same logits on both devices.
  Tensor x = lstm_batches(10)[0].x;
  NoGradGuard no_grad;
  testing::expect_close(gpu_model.forward(x.to(kCUDA)).cpu(), cpu_model.forward(x), 1e-4);
  std::remove(path.c_str());
}

TEST(CudaTraining, MixedDevicesAreAClearError) {
  SKIP_WITHOUT_GPU();
  Tensor on_cpu = ones({2, 3});
  Tensor on_gpu = ones({2, 3}, kCUDA);
  expect_error([&] { add(on_cpu, on_gpu); }, {"add", "same device", "cpu", "cuda:0"});
  expect_error([&] { matmul(on_cpu, on_gpu.t()); }, {"same device"});
  // A CPU batch fed to a model on the GPU.
  auto model = make_mlp(1);
  model->to(kCUDA);
  expect_error([&] { model->forward(randn({4, 20})); }, {"same device", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace tapegrad
