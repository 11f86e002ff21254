// cuda::Graph: a whole training step (forward, loss, backward, optimiser step) captured once and
// replayed per batch gives the losses and parameters of the same steps run eagerly (bit for bit in
// the emulation build); what cannot be captured is a clear Error naming it; the private pool keeps
// the captured addresses out of other allocations and reset() gives the memory back; capturable
// Adam equals plain Adam (CPU and GPU) and its state dict round-trips. Skips without a GPU.
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "support/gpu.h"
#include "support/test_util.h"
#include "tapegrad/cuda/graph.h"
#include "tapegrad/cuda/memory.h"
#include "tapegrad/cuda/stream.h"

namespace tapegrad {
namespace {

using testing::expect_error;

// Graphs need the caching allocator (their private pool); the sanitizer runs turn it off.
#define SKIP_WITHOUT_GRAPHS()             \
  SKIP_WITHOUT_GPU();                     \
  if (!cuda::caching_allocator_enabled()) \
  GTEST_SKIP() << "TAPEGRAD_CUDA_CACHING_ALLOCATOR=0: cuda::Graph needs the caching allocator's pools"

constexpr int kWarmup = 2;
constexpr int kSteps = 6;

struct Batch {
  Tensor x, y;
};

// Regression batches [16, 12] -> [16, 3] on the CPU; step k uses batch k % size.
std::vector<Batch> regression_batches() {
  Generator g(7);
  std::vector<Batch> batches;
  for (int i = 0; i < 3; ++i) batches.push_back({randn({16, 12}, {}, &g), randn({16, 3}, {}, &g)});
  return batches;
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  Generator g(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(12, 24, true, &g), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(24, 3, true, &g)});
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

MakeOptimizer adam(bool capturable) {
  return [capturable](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(1e-2).capturable(capturable));
  };
}

MakeOptimizer sgd_momentum() {
  return [](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(5e-2).momentum(0.9).weight_decay(1e-3));
  };
}

struct Run {
  std::vector<double> losses;
  StateDict parameters;
};

// kSteps eager steps: zero_grad, forward, mse_loss, backward, step.
Run eager_run(const MakeOptimizer& make) {
  auto model = make_mlp(3);
  model->to(kCUDA);
  auto opt = make(model->parameters());
  Run run;
  const std::vector<Batch> batches = regression_batches();
  for (int k = 0; k < kSteps; ++k) {
    const Batch& b = batches[k % batches.size()];
    opt->zero_grad();
    Tensor loss = mse_loss(model->forward(b.x.to(kCUDA)), b.y.to(kCUDA));
    loss.backward();
    opt->step();
    run.losses.push_back(loss.item());
  }
  run.parameters = model->state_dict();
  return run;
}

// The same steps: kWarmup eager ones, then one captured and replayed for the rest, each batch
// copied into the static input tensors first.
Run graph_run(const MakeOptimizer& make) {
  auto model = make_mlp(3);
  model->to(kCUDA);
  auto opt = make(model->parameters());
  const std::vector<Batch> batches = regression_batches();
  Tensor static_x = zeros({16, 12}, kCUDA), static_y = zeros({16, 3}, kCUDA);
  Tensor static_loss;
  auto step = [&] {
    opt->zero_grad();
    static_loss = mse_loss(model->forward(static_x), static_y);
    static_loss.backward();
    opt->step();
  };
  Run run;
  for (int k = 0; k < kWarmup; ++k) {
    static_x.copy_(batches[k % batches.size()].x);
    static_y.copy_(batches[k % batches.size()].y);
    step();
    run.losses.push_back(static_loss.item());
  }
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph);
    step();
  }
  EXPECT_TRUE(graph.has_graph());
  for (int k = kWarmup; k < kSteps; ++k) {
    static_x.copy_(batches[k % batches.size()].x);
    static_y.copy_(batches[k % batches.size()].y);
    graph.replay();
    run.losses.push_back(static_loss.item());
  }
  run.parameters = model->state_dict();
  return run;
}

void expect_same_runs(const Run& eager, const Run& replayed) {
  // The emulator runs the same kernels with the same arguments in the same order: same bits. A GPU
  // may pick other GEMM algorithms inside a graph, so a few ulps there.
  const double tol = testing::cuda_is_emulated() ? 0.0 : 1e-5;
  ASSERT_EQ(eager.losses.size(), replayed.losses.size());
  for (size_t k = 0; k < eager.losses.size(); ++k)
    EXPECT_NEAR(replayed.losses[k], eager.losses[k], tol * std::abs(eager.losses[k])) << "step " << k;
  // The losses change from batch to batch: the replays saw each new batch.
  EXPECT_NE(replayed.losses[kWarmup], replayed.losses[kWarmup + 1]);
  ASSERT_EQ(eager.parameters.size(), replayed.parameters.size());
  for (size_t i = 0; i < eager.parameters.size(); ++i) {
    const std::vector<double> a = testing::values(eager.parameters[i].second.cpu());
    const std::vector<double> b = testing::values(replayed.parameters[i].second.cpu());
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j)
      ASSERT_NEAR(b[j], a[j], tol * (1 + std::abs(a[j]))) << eager.parameters[i].first << "[" << j << "]";
  }
}

TEST(CudaGraph, ReplayedAdamStepsMatchEagerSteps) {
  SKIP_WITHOUT_GRAPHS();
  // Eager with plain Adam, the graph with capturable Adam: also shows the two give the same bits.
  expect_same_runs(eager_run(adam(false)), graph_run(adam(true)));
}

TEST(CudaGraph, ReplayedSgdMomentumStepsMatchEagerSteps) {
  SKIP_WITHOUT_GRAPHS();
  expect_same_runs(eager_run(sgd_momentum()), graph_run(sgd_momentum()));
}

TEST(CudaGraph, CaptureLeavesTheDefaultStreamCurrent) {
  SKIP_WITHOUT_GRAPHS();
  Tensor x = ones({8}, kCUDA);
  Tensor y;
  cuda::Graph graph;
  graph.capture_begin();
  EXPECT_TRUE(graph.is_capturing());
  EXPECT_TRUE(cuda::is_current_stream_capturing());
  EXPECT_FALSE(cuda::current_stream().is_default());  // the graph's side stream
  EXPECT_EQ(cuda::current_stream(), graph.capture_stream());
  y = x * 3.0;
  graph.capture_end();
  EXPECT_TRUE(cuda::current_stream().is_default());
  EXPECT_FALSE(cuda::is_current_stream_capturing());
  graph.replay();
  testing::expect_close(y.cpu(), std::vector<double>(8, 3.0));
  // The replay reads x as it is at replay time.
  x.copy_(full({8}, 2.0));
  graph.replay();
  testing::expect_close(y.cpu(), std::vector<double>(8, 6.0));
}

// The cross-entropy step: its loss checks the targets' range on the host today, which a capture
// refuses; it passes once that check moves to the device.
TEST(CudaGraph, CrossEntropyStepReplaysOnceItNoLongerSyncs) {
  SKIP_WITHOUT_GRAPHS();
  auto model = make_mlp(5);
  model->to(kCUDA);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2).capturable(true));
  Generator g(9);
  Tensor static_x = randn({16, 12}, {}, &g).to(kCUDA);
  Tensor static_y = randint(0, 3, {16}, TensorOptions(kInt64), &g).to(kCUDA);
  Tensor loss;
  auto step = [&] {
    opt.zero_grad();
    loss = cross_entropy(model->forward(static_x), static_y);
    loss.backward();
    opt.step();
  };
  step();
  cuda::Graph graph;
  try {
    cuda::GraphCapture capture(graph);
    step();
  } catch (const Error& e) {
    const std::string what = e.what();
    ASSERT_NE(what.find("capture"), std::string::npos) << what;
    GTEST_SKIP() << "cross_entropy still waits for the GPU during capture (enable this check once the host "
                    "synchronisation of its target check is gone): "
                 << what;
  }
  // Eager twin from the state before the graph's first replay.
  auto twin = make_mlp(5);
  twin->to(kCUDA);
  twin->load_state_dict(model->state_dict());
  optim::Adam twin_opt(twin->parameters(), optim::AdamOptions(1e-2));
  twin_opt.load_state_dict(opt.state_dict());
  for (int k = 0; k < 3; ++k) {
    graph.replay();
    twin_opt.zero_grad();
    Tensor twin_loss = cross_entropy(twin->forward(static_x), static_y);
    twin_loss.backward();
    twin_opt.step();
    EXPECT_NEAR(loss.item(), twin_loss.item(), 1e-5 * std::abs(twin_loss.item())) << "replay " << k;
  }
}

TEST(CudaGraph, HostSynchronisationInCaptureIsAClearError) {
  SKIP_WITHOUT_GRAPHS();
  Tensor x = ones({4}, kCUDA);
  cuda::Graph graph;
  expect_error(
      [&] {
        cuda::GraphCapture capture(graph);
        Tensor y = x * 2.0;
        (void)sum(y).item();  // a copy to the host: waits for the GPU
      },
      {"copy to cpu", "capture"});
  // Abandoned: nothing held, the default stream current again, and the graph can capture anew.
  EXPECT_FALSE(graph.has_graph());
  EXPECT_FALSE(graph.is_capturing());
  EXPECT_TRUE(cuda::current_stream().is_default());
  expect_error(
      [&] {
        cuda::GraphCapture capture(graph);
        cuda::synchronize();
      },
      {"cuda::synchronize", "capture"});
  // A failure the caller swallowed is still named when the capture ends.
  graph.capture_begin();
  try {
    cuda::current_stream().synchronize();
  } catch (const Error&) {
  }
  expect_error([&] { graph.capture_end(); }, {"capture_end", "cuda::Stream::synchronize", "could not be captured"});
  Tensor y;
  {
    cuda::GraphCapture capture(graph);
    y = x + 1.0;
  }
  graph.replay();
  testing::expect_close(y.cpu(), std::vector<double>(4, 2.0));
}

TEST(CudaGraph, MisuseIsAClearError) {
  SKIP_WITHOUT_GRAPHS();
  cuda::Graph graph;
  expect_error([&] { graph.replay(); }, {"cuda::Graph::replay", "nothing captured"});
  expect_error([&] { graph.capture_end(); }, {"cuda::Graph::capture_end", "not capturing"});
  graph.capture_begin();
  expect_error([&] { graph.capture_begin(); }, {"capture_begin", "capturing already"});
  expect_error([&] { graph.replay(); }, {"replay", "still capturing"});
  graph.capture_end();
  expect_error([&] { graph.capture_begin(); }, {"capture_begin", "reset()"});
  graph.reset();
  graph.capture_begin();
  graph.capture_end();
}

TEST(CudaGraph, OptimisersRefuseWhatCannotBeCaptured) {
  SKIP_WITHOUT_GRAPHS();
  auto model = make_mlp(4);
  model->to(kCUDA);
  Tensor x = ones({2, 12}, kCUDA), y = zeros({2, 3}, kCUDA);
  auto backward = [&] {
    Tensor loss = mse_loss(model->forward(x), y);
    loss.backward();
  };
  {
    optim::Adam plain(model->parameters(), optim::AdamOptions(1e-2));
    backward();
    plain.step();  // warmed up, but not capturable
    cuda::Graph graph;
    expect_error(
        [&] {
          cuda::GraphCapture capture(graph);
          plain.step();
        },
        {"Adam", "capturable(true)"});
  }
  {
    optim::Adam fresh(model->parameters(), optim::AdamOptions(1e-2).capturable(true));
    cuda::Graph graph;
    expect_error(
        [&] {
          cuda::GraphCapture capture(graph);
          fresh.step();
        },
        {"Adam", "parameter 0", "warm-up step"});
  }
  {
    optim::SGD sgd(model->parameters(), optim::SGDOptions(1e-2).momentum(0.9));
    cuda::Graph graph;
    expect_error(
        [&] {
          cuda::GraphCapture capture(graph);
          sgd.step();
        },
        {"SGD", "momentum buffer", "warm-up step"});
  }
}

TEST(CudaGraph, PoolKeepsCapturedAddressesForTheGraph) {
  SKIP_WITHOUT_GRAPHS();
  Tensor x = full({1000}, 1.0, kCUDA);
  Tensor out;
  const void* intermediate = nullptr;
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph);
    Tensor t = x * 2.0;  // freed inside the capture: its block goes back to the graph's pool only
    intermediate = t.data_ptr();
    out = t + 1.0;
  }
  // Eager allocations of the same size never get the intermediate's address, which every replay
  // writes.
  std::vector<Tensor> eager;
  for (int i = 0; i < 8; ++i) {
    eager.push_back(full({1000}, -5.0, kCUDA));
    EXPECT_NE(eager.back().data_ptr(), intermediate);
  }
  x.copy_(full({1000}, 3.0));
  for (int r = 0; r < 2; ++r) graph.replay();
  testing::expect_close(out.cpu(), std::vector<double>(1000, 7.0));
  for (const Tensor& e : eager) testing::expect_close(e.cpu(), std::vector<double>(1000, -5.0));
  // The output lives at the same address across replays.
  const void* before = out.data_ptr();
  graph.replay();
  EXPECT_EQ(out.data_ptr(), before);
}

TEST(CudaGraph, ResetGivesThePoolsMemoryBack) {
  SKIP_WITHOUT_GRAPHS();
  Tensor x = full({4096}, 1.0, kCUDA);
  cuda::synchronize();
  cuda::empty_cache();
  const size_t baseline = cuda::memory_reserved();
  cuda::Graph graph;
  Tensor out;
  {
    cuda::GraphCapture capture(graph);
    out = (x * 2.0) + 1.0;
  }
  graph.replay();
  EXPECT_GT(cuda::memory_reserved(), baseline);  // the pool's segments
  cuda::empty_cache();                           // does not touch a live graph's pool
  EXPECT_GT(cuda::memory_reserved(), baseline);
  testing::expect_close(out.cpu(), std::vector<double>(4096, 3.0));
  // The output still holds pool memory at reset: that segment stays until the tensor goes.
  graph.reset();
  EXPECT_FALSE(graph.has_graph());
  EXPECT_GT(cuda::memory_reserved(), baseline);
  out = Tensor();
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(), baseline);
  // Negative control: without the reset, the same sequence keeps the memory.
  cuda::Graph kept;
  {
    cuda::GraphCapture capture(kept);
    out = x * 4.0;
  }
  out = Tensor();
  cuda::empty_cache();
  EXPECT_GT(cuda::memory_reserved(), baseline);
  kept.reset();
  EXPECT_EQ(cuda::memory_reserved(), baseline);
}

// ---- capturable Adam ----------------------------------------------------------------------------

// Runs `steps` steps of Adam with the given options on parameters of `device` from fixed values
// and gradients; returns the parameters and the state dict.
std::pair<std::vector<Tensor>, StateDict> adam_steps(Device device, const optim::AdamOptions& options, int steps,
                                                     bool decoupled = false) {
  Generator g(21);
  std::vector<Tensor> params{randn({5, 7}, {}, &g).to(device).requires_grad_(),
                             randn({7}, {}, &g).to(device).requires_grad_()};
  std::unique_ptr<optim::Adam> opt =
      decoupled ? std::make_unique<optim::AdamW>(params, options) : std::make_unique<optim::Adam>(params, options);
  for (int k = 0; k < steps; ++k) {
    for (Tensor& p : params) p.set_grad(randn(p.sizes(), {}, &g).to(device));
    opt->step();
  }
  return {params, opt->state_dict()};
}

void expect_same_tensors(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(testing::values(a[i].cpu()), testing::values(b[i].cpu())) << i;
}

TEST(CapturableAdam, EqualsPlainAdamOnCpu) {
  for (bool amsgrad : {false, true})
    for (bool foreach : {true, false}) {
      const auto options = optim::AdamOptions(3e-2).weight_decay(1e-2).amsgrad(amsgrad).foreach (foreach);
      auto plain = adam_steps(kCPU, options, 5);
      auto capturable = adam_steps(kCPU, optim::AdamOptions(options).capturable(true), 5);
      expect_same_tensors(plain.first, capturable.first);
      auto plain_w = adam_steps(kCPU, options, 5, true);
      auto capturable_w = adam_steps(kCPU, optim::AdamOptions(options).capturable(true), 5, true);
      expect_same_tensors(plain_w.first, capturable_w.first);
    }
}

TEST(CapturableAdam, EqualsPlainAdamOnGpu) {
  SKIP_WITHOUT_GPU();
  for (bool foreach : {true, false}) {
    const auto options = optim::AdamOptions(3e-2).amsgrad(true).foreach (foreach);
    auto plain = adam_steps(kCUDA, options, 4);
    auto capturable = adam_steps(kCUDA, optim::AdamOptions(options).capturable(true), 4);
    expect_same_tensors(plain.first, capturable.first);
  }
}

TEST(CapturableAdam, StateDictRoundTripsBothWays) {
  const auto options = optim::AdamOptions(3e-2);
  auto capturable = adam_steps(kCPU, optim::AdamOptions(options).capturable(true), 3);
  // The step count is saved as PyTorch's float32 scalar, read from the device's count.
  bool found = false;
  for (const auto& [key, value] : capturable.second)
    if (key == "0.step") {
      found = true;
      EXPECT_EQ(value.dtype(), kFloat32);
      EXPECT_EQ(value.item(), 3.0);
    }
  EXPECT_TRUE(found);
  // Loaded into plain Adam and into capturable Adam, two more steps agree with five plain ones.
  auto five = adam_steps(kCPU, options, 5);
  for (bool load_capturable : {false, true}) {
    Generator g(21);
    std::vector<Tensor> params = capturable.first;
    for (Tensor& p : params) p = p.detach().clone().requires_grad_();
    optim::Adam opt(params, optim::AdamOptions(options).capturable(load_capturable));
    opt.load_state_dict(capturable.second);
    // The same gradients as steps 4 and 5 of adam_steps: skip the first three draws.
    std::vector<Tensor> skipped{randn({5, 7}, {}, &g), randn({7}, {}, &g)};
    for (int k = 0; k < 3; ++k)
      for (const Tensor& p : params) (void)randn(p.sizes(), {}, &g);
    for (int k = 0; k < 2; ++k) {
      for (Tensor& p : params) p.set_grad(randn(p.sizes(), {}, &g));
      opt.step();
    }
    expect_same_tensors(params, five.first);
  }
}

}  // namespace
}  // namespace tapegrad
