// The cuDNN LSTM (LstmImplementation::CuDNN) against our fused LSTM on CUDA and on the CPU: same
// initial weights and inputs, then output, h_n, c_n and every gradient (input, initial state,
// each parameter) compared. Skips where no GPU is present.
#include <cmath>
#include <optional>
#include <string>

#include "backend/cudnn_lstm.h"
#include "backend/kernel_table.h"
#include "support/gpu.h"
#include "support/parity.h"
#include "support/test_util.h"
#include "tapegrad/amp/autocast.h"

namespace tapegrad {
namespace {

using nn::LstmImplementation;
using testing::expect_error;
using testing::values;

// The CUDA emulation build (-DTAPEGRAD_CUDA=EMULATE) has a device but no cuDNN: its slots stay empty.
#define SKIP_WITHOUT_CUDNN()                         \
  SKIP_WITHOUT_GPU();                                \
  if (backend::kernels(kCUDA).cudnn_lstm == nullptr) \
  GTEST_SKIP() << "cuDNN is not emulated: the CUDA emulation build has no cuDNN LSTM"

struct Case {
  std::string name;
  int64_t input_size = 5, hidden = 4, layers = 1, steps = 6, batch = 3;
  bool bidirectional = false, batch_first = false, bias = true;
  std::vector<int64_t> lengths;  // empty: every sequence has all steps
  bool lengths_on_device = false;
  bool given_state = false;  // h0 and c0 given (and differentiated)
  bool noncontiguous_input = false;
  bool input_needs_grad = true, params_need_grad = true;
  DType dtype = kFloat32;
};

nn::LSTMOptions options_of(const Case& c, LstmImplementation implementation) {
  return nn::LSTMOptions()
      .num_layers(c.layers)
      .bidirectional(c.bidirectional)
      .batch_first(c.batch_first)
      .bias(c.bias)
      .implementation(implementation);
}

struct Result {
  Tensor output, h_n, c_n, dx, dh0, dc0;
  std::vector<std::pair<std::string, Tensor>> param_grads;
};

// One forward and backward of a freshly initialised LSTM (the same weights whatever the
// implementation and device) on the same inputs, with a loss that reaches every output.
Result run(const Case& c, LstmImplementation implementation, Device device, int backward_passes = 1) {
  Generator init(1234);
  nn::LSTM lstm(c.input_size, c.hidden, options_of(c, implementation), &init);
  lstm.to(c.dtype);
  lstm.to(device);
  if (!c.params_need_grad)
    for (Tensor p : lstm.parameters()) p.requires_grad_(false);

  const TensorOptions host(c.dtype);
  Generator data(99);
  const Shape x_shape = c.batch_first ? Shape{c.batch, c.steps, c.input_size} : Shape{c.steps, c.batch, c.input_size};
  // For a non-contiguous input, the leaf has the two leading dims swapped and is fed transposed.
  const Shape leaf_shape = c.noncontiguous_input ? Shape{x_shape[1], x_shape[0], x_shape[2]} : x_shape;
  Tensor x_leaf = randn(leaf_shape, host, &data).to(device);
  if (c.input_needs_grad) x_leaf.requires_grad_(true);
  Tensor x = c.noncontiguous_input ? x_leaf.transpose(0, 1) : x_leaf;

  const int64_t directions = c.bidirectional ? 2 : 1;
  const Shape state_shape{c.layers * directions, c.batch, c.hidden};
  Tensor h0, c0;
  if (c.given_state) {
    h0 = randn(state_shape, host, &data).to(device).requires_grad_(true);
    c0 = randn(state_shape, host, &data).to(device).requires_grad_(true);
  }
  Tensor lengths;
  if (!c.lengths.empty()) {
    lengths = tensor<int64_t>(c.lengths, {c.batch});
    if (c.lengths_on_device) lengths = lengths.to(device);
  }

  nn::LSTMOutput out = lstm.forward(x, h0, c0, lengths);
  Generator weights(5);
  Tensor w_out = randn(out.output.sizes(), host, &weights).to(device);
  Tensor w_h = randn(out.h_n.sizes(), host, &weights).to(device);
  Tensor w_c = randn(out.c_n.sizes(), host, &weights).to(device);
  Tensor loss = (out.output * w_out).sum() + (out.h_n * w_h).sum() + (out.c_n * w_c).sum();
  for (int pass = 0; pass < backward_passes; ++pass)
    loss.backward(Tensor(), /*retain_graph=*/pass + 1 < backward_passes);

  Result r;
  r.output = out.output.detach().cpu();
  r.h_n = out.h_n.detach().cpu();
  r.c_n = out.c_n.detach().cpu();
  if (x_leaf.grad().defined()) r.dx = x_leaf.grad().cpu();
  if (h0.defined()) r.dh0 = h0.grad().cpu();
  if (c0.defined()) r.dc0 = c0.grad().cpu();
  for (const auto& [name, p] : lstm.named_parameters())
    r.param_grads.emplace_back(name, p.grad().defined() ? p.grad().cpu() : Tensor());
  return r;
}

void expect_allclose(const Tensor& actual, const Tensor& expected, double rtol, double atol, const std::string& what) {
  testing::expect_allclose(actual, expected, {rtol, atol}, what);
}

void expect_same_results(const Result& actual, const Result& expected, double rtol, double atol,
                         const std::string& label) {
  expect_allclose(actual.output, expected.output, rtol, atol, label + " output");
  expect_allclose(actual.h_n, expected.h_n, rtol, atol, label + " h_n");
  expect_allclose(actual.c_n, expected.c_n, rtol, atol, label + " c_n");
  expect_allclose(actual.dx, expected.dx, rtol, atol, label + " input grad");
  expect_allclose(actual.dh0, expected.dh0, rtol, atol, label + " h0 grad");
  expect_allclose(actual.dc0, expected.dc0, rtol, atol, label + " c0 grad");
  ASSERT_EQ(actual.param_grads.size(), expected.param_grads.size()) << label;
  for (size_t i = 0; i < actual.param_grads.size(); ++i) {
    EXPECT_EQ(actual.param_grads[i].first, expected.param_grads[i].first) << label;
    expect_allclose(actual.param_grads[i].second, expected.param_grads[i].second, rtol, atol,
                    label + " grad of " + actual.param_grads[i].first);
  }
}

constexpr double kRtolF32 = 1e-4, kAtolF32 = 1e-5;

// --- Parity over the configurations --------------------------------------------------------------

std::vector<Case> parity_cases() {
  std::vector<Case> cases;
  auto add = [&](const std::string& name, auto&& edit) {
    Case c;
    c.name = name;
    edit(c);
    cases.push_back(c);
  };
  add("OneLayer", [](Case&) {});
  add("TwoLayers", [](Case& c) { c.layers = 2; });
  add("Bidirectional", [](Case& c) { c.bidirectional = true; });
  add("TwoLayersBidirectional", [](Case& c) {
    c.layers = 2;
    c.bidirectional = true;
  });
  add("BatchFirst", [](Case& c) {
    c.batch_first = true;
    c.layers = 2;
  });
  add("NoBias", [](Case& c) {
    c.bias = false;
    c.layers = 2;
    c.bidirectional = true;
  });
  add("VariableLengths", [](Case& c) {
    c.batch = 4;
    c.lengths = {6, 2, 4, 1};
  });
  add("VariableLengthsBidirectionalTwoLayers", [](Case& c) {
    c.batch = 4;
    c.layers = 2;
    c.bidirectional = true;
    c.lengths = {3, 6, 1, 5};
  });
  add("VariableLengthsBatchFirstOnDevice", [](Case& c) {
    c.batch = 4;
    c.batch_first = true;
    c.bidirectional = true;
    c.lengths = {2, 6, 6, 4};
    c.lengths_on_device = true;
  });
  add("ZeroLengthSequence", [](Case& c) {
    c.batch = 4;
    c.layers = 2;
    c.bidirectional = true;
    c.lengths = {4, 0, 6, 0};
    c.given_state = true;
  });
  add("GivenState", [](Case& c) { c.given_state = true; });
  add("GivenStateTwoLayersBidirectional", [](Case& c) {
    c.given_state = true;
    c.layers = 2;
    c.bidirectional = true;
  });
  add("Everything", [](Case& c) {
    c.layers = 3;
    c.bidirectional = true;
    c.batch_first = true;
    c.bias = false;
    c.given_state = true;
    c.batch = 5;
    c.lengths = {6, 1, 3, 6, 2};
  });
  add("NonContiguousInput", [](Case& c) {
    c.noncontiguous_input = true;
    c.layers = 2;
  });
  add("OnlyParametersNeedGrad", [](Case& c) {
    c.input_needs_grad = false;
    c.layers = 2;
  });
  add("OnlyInputNeedsGrad", [](Case& c) {
    c.params_need_grad = false;
    c.given_state = true;
  });
  add("LargerSizes", [](Case& c) {
    c.input_size = 37;
    c.hidden = 48;
    c.layers = 2;
    c.bidirectional = true;
    c.steps = 25;
    c.batch = 9;
    c.lengths = {25, 13, 1, 25, 7, 24, 25, 2, 19};
  });
  return cases;
}

class CudnnLstmParity : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnLstmParity, MatchesFusedOnCudaAndCpu) {
  SKIP_WITHOUT_CUDNN();
  const Case& c = GetParam();
  Result cudnn = run(c, LstmImplementation::CuDNN, kCUDA);
  Result fused_cuda = run(c, LstmImplementation::Fused, kCUDA);
  Result fused_cpu = run(c, LstmImplementation::Fused, kCPU);
  expect_same_results(cudnn, fused_cpu, kRtolF32, kAtolF32, "cudnn vs cpu:");
  expect_same_results(cudnn, fused_cuda, kRtolF32, kAtolF32, "cudnn vs fused cuda:");
}

INSTANTIATE_TEST_SUITE_P(Configurations, CudnnLstmParity, ::testing::ValuesIn(parity_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// --- Behaviour beyond one forward and backward ---------------------------------------------------

TEST(CudnnLstm, Float64MatchesTheCpu) {
  SKIP_WITHOUT_CUDNN();
  Case c;
  c.dtype = kFloat64;
  c.layers = 2;
  c.bidirectional = true;
  c.lengths = {6, 3, 1};
  c.given_state = true;
  Result cudnn;
  try {
    cudnn = run(c, LstmImplementation::CuDNN, kCUDA);
  } catch (const Error& e) {
    // cuDNN may refuse double for RNNs; the error must then say so clearly.
    std::string message = e.what();
    EXPECT_NE(message.find("lstm (cudnn)"), std::string::npos) << message;
    EXPECT_NE(message.find("CUDNN_STATUS"), std::string::npos) << message;
    GTEST_SKIP() << "cuDNN does not run this LSTM in float64: " << message;
  }
  expect_same_results(cudnn, run(c, LstmImplementation::Fused, kCPU), 1e-9, 1e-11, "cudnn f64 vs cpu:");
}

TEST(CudnnLstm, RetainedGraphBackwardTwiceAccumulates) {
  SKIP_WITHOUT_CUDNN();
  Case c;
  c.layers = 2;
  c.bidirectional = true;
  c.given_state = true;
  c.lengths = {6, 2, 4};
  Result once = run(c, LstmImplementation::CuDNN, kCUDA, 1);
  Result twice = run(c, LstmImplementation::CuDNN, kCUDA, 2);
  auto doubled = [](const Tensor& t) { return t.defined() ? t * 2.0 : t; };
  Result expected = once;
  expected.dx = doubled(once.dx);
  expected.dh0 = doubled(once.dh0);
  expected.dc0 = doubled(once.dc0);
  for (auto& [name, g] : expected.param_grads) g = doubled(g);
  expect_same_results(twice, expected, kRtolF32, kAtolF32, "second backward:");
}

TEST(CudnnLstm, InferenceUnderNoGradMatchesAndRecordsNothing) {
  SKIP_WITHOUT_CUDNN();
  Generator init(3), data(4);
  nn::LSTMOptions options = nn::LSTMOptions().num_layers(2).bidirectional(true);
  nn::LSTM cudnn(5, 4, nn::LSTMOptions(options).implementation(LstmImplementation::CuDNN), &init);
  Generator init_again(3);
  nn::LSTM fused(5, 4, options, &init_again);
  cudnn.to(kCUDA);
  Tensor x = randn({6, 3, 5}, {}, &data);
  NoGradGuard no_grad;
  nn::LSTMOutput a = cudnn.forward(x.to(kCUDA));
  nn::LSTMOutput b = fused.forward(x);
  EXPECT_FALSE(a.output.requires_grad());
  expect_allclose(a.output.cpu(), b.output, kRtolF32, kAtolF32, "output");
  expect_allclose(a.h_n.cpu(), b.h_n, kRtolF32, kAtolF32, "h_n");
  expect_allclose(a.c_n.cpu(), b.c_n, kRtolF32, kAtolF32, "c_n");
}

TEST(CudnnLstm, DropoutActsInTrainingOnlyAndBackpropagates) {
  SKIP_WITHOUT_CUDNN();
  Generator init(11), init_again(11), data(12);
  nn::LSTMOptions options = nn::LSTMOptions().num_layers(3).dropout(0.5);
  nn::LSTM cudnn(5, 16, nn::LSTMOptions(options).implementation(LstmImplementation::CuDNN), &init);
  nn::LSTM fused(5, 16, options, &init_again);
  cudnn.to(kCUDA);
  Tensor x = randn({7, 4, 5}, {}, &data);

  // Evaluation mode: no dropout, so the two implementations agree.
  cudnn.eval();
  fused.eval();
  Tensor eval_output = cudnn.forward(x.to(kCUDA)).output.cpu();
  expect_allclose(eval_output, fused.forward(x).output, kRtolF32, kAtolF32, "eval output");

  // Training mode: masks between layers change the output, and differ from call to call.
  cudnn.train();
  Tensor x_leaf = x.to(kCUDA).requires_grad_(true);
  nn::LSTMOutput first = cudnn.forward(x_leaf);
  Tensor second = cudnn.forward(x_leaf).output.detach().cpu();
  std::vector<double> train_values = values(first.output.detach().cpu());
  EXPECT_NE(train_values, values(eval_output));
  EXPECT_NE(train_values, values(second));
  first.output.sum().backward();
  for (double v : values(x_leaf.grad().cpu())) ASSERT_TRUE(std::isfinite(v));
  for (const Tensor& p : cudnn.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    for (double v : values(p.grad().cpu())) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(CudnnLstm, EmptySequenceAndEmptyBatchMatchFused) {
  SKIP_WITHOUT_CUDNN();
  for (const Shape& shape : {Shape{0, 3, 5}, Shape{4, 0, 5}}) {
    Generator init(1), init_again(1);
    nn::LSTMOptions options = nn::LSTMOptions().num_layers(2);
    nn::LSTM cudnn(5, 4, nn::LSTMOptions(options).implementation(LstmImplementation::CuDNN), &init);
    nn::LSTM fused(5, 4, options, &init_again);
    cudnn.to(kCUDA);
    Tensor h0 = full({2, shape[1], 4}, 0.25), c0 = full({2, shape[1], 4}, -0.5);
    nn::LSTMOutput a = cudnn.forward(zeros(shape, kCUDA), h0.to(kCUDA), c0.to(kCUDA));
    nn::LSTMOutput b = fused.forward(zeros(shape), h0, c0);
    EXPECT_EQ(a.output.sizes(), b.output.sizes());
    expect_allclose(a.h_n.cpu(), b.h_n, 0, 0, "h_n");
    expect_allclose(a.c_n.cpu(), b.c_n, 0, 0, "c_n");
  }
}

// --- Precision: TF32, 16-bit tensors, autocast ---------------------------------------------------

struct Tf32Guard {
  explicit Tf32Guard(bool allow) : previous(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Guard() { cuda::set_allow_tf32(previous); }
  bool previous;
};

// Sizes where tensor cores are worth cuDNN's while, so that TF32 and 16-bit math show.
Case precision_case() {
  Case c;
  c.input_size = 64;
  c.hidden = 128;
  c.layers = 2;
  c.steps = 12;
  c.batch = 16;
  c.given_state = true;
  return c;
}

TEST(CudnnLstm, Tf32IsUsedOnlyWhenAllowed) {
  SKIP_WITHOUT_CUDNN();
  const Case c = precision_case();
  const Result cpu = run(c, LstmImplementation::Fused, kCPU);
  {
    const Tf32Guard off(false);  // FMA math: float32 agreement
    expect_same_results(run(c, LstmImplementation::CuDNN, kCUDA), cpu, kRtolF32, kAtolF32, "tf32 off:");
  }
  const Tf32Guard on(true);  // cuDNN's default math: TF32 products (10-bit mantissas) may be used
  const Result tf32 = run(c, LstmImplementation::CuDNN, kCUDA);
  expect_same_results(tf32, cpu, 2e-2, 2e-2, "tf32 on:");
  const double diff = max(abs(sub(tf32.output, cpu.output))).item<double>();
  RecordProperty("tf32_max_output_difference", std::to_string(diff));
}

// The module and inputs of `c` (float32 values) converted to `dtype` on the GPU, or under autocast.
Result run_low_precision(Case c, DType dtype, bool autocast) {
  c.dtype = kFloat32;
  Generator init(1234), data(99);
  nn::LSTM lstm(c.input_size, c.hidden, options_of(c, LstmImplementation::CuDNN), &init);
  lstm.to(kCUDA);
  if (!autocast) lstm.to(dtype);
  const DType tensors = autocast ? kFloat32 : dtype;
  Tensor x = randn({c.steps, c.batch, c.input_size}, {}, &data).to(kCUDA).to(tensors).requires_grad_(true);
  const Shape state_shape{c.layers, c.batch, c.hidden};
  Tensor h0 = randn(state_shape, {}, &data).to(kCUDA).to(tensors).requires_grad_(true);
  Tensor c0 = randn(state_shape, {}, &data).to(kCUDA).to(tensors).requires_grad_(true);
  std::optional<amp::AutocastGuard> guard;
  if (autocast) guard.emplace(kCUDA, dtype);
  nn::LSTMOutput out = lstm.forward(x, h0, c0);
  guard.reset();
  EXPECT_EQ(out.output.dtype(), tensors);
  Generator weights(5);
  Tensor w_out = randn(out.output.sizes(), {}, &weights).to(kCUDA).to(tensors);
  (out.output * w_out).sum().backward();
  Result r;
  r.output = out.output.detach().cpu().to(kFloat32);
  r.h_n = out.h_n.detach().cpu().to(kFloat32);
  r.c_n = out.c_n.detach().cpu().to(kFloat32);
  EXPECT_EQ(x.grad().dtype(), tensors);
  r.dx = x.grad().cpu().to(kFloat32);
  r.dh0 = h0.grad().cpu().to(kFloat32);
  r.dc0 = c0.grad().cpu().to(kFloat32);
  for (const auto& [name, p] : lstm.named_parameters()) {
    EXPECT_EQ(p.grad().dtype(), tensors) << name;
    r.param_grads.emplace_back(name, p.grad().cpu().to(kFloat32));
  }
  return r;
}

// The same module and inputs in float32 with the same loss, for the comparisons above.
Result run_float32_reference(const Case& c) {
  const Tf32Guard off(false);
  return run_low_precision(c, kFloat32, false);
}

TEST(CudnnLstm, SixteenBitTensorsAndAutocastMatchFloat32) {
  SKIP_WITHOUT_CUDNN();
  Case c = precision_case();
  const Result reference = run_float32_reference(c);
  struct Mode {
    DType dtype;
    bool autocast;
    double tol;
    const char* name;
  };
  for (Mode m : {Mode{kFloat16, false, 2e-2, "float16"}, Mode{kBFloat16, false, 1e-1, "bfloat16"},
                 Mode{kFloat16, true, 2e-2, "autocast float16"}, Mode{kBFloat16, true, 1e-1, "autocast bfloat16"}}) {
    Result low;
    try {
      low = run_low_precision(c, m.dtype, m.autocast);
    } catch (const Error& e) {
      // A cuDNN without this RNN data type must say so clearly (as for float64 above).
      const std::string message = e.what();
      EXPECT_NE(message.find("lstm (cudnn)"), std::string::npos) << message;
      EXPECT_NE(message.find("CUDNN_STATUS"), std::string::npos) << message;
      ADD_FAILURE() << m.name << ": cuDNN refused the data type: " << message;
      continue;
    }
    expect_same_results(low, reference, m.tol, m.tol, std::string(m.name) + ":");
    // Negative control: the 16-bit run really ran in 16 bits.
    EXPECT_GT(max(abs(sub(low.output, reference.output))).item<double>(), 0.0) << m.name;
  }
}

// --- The packed weights kept across calls --------------------------------------------------------

TEST(CudnnLstm, PackedWeightsAreReusedUntilAWeightChanges) {
  SKIP_WITHOUT_CUDNN();
  Generator g(21);
  TensorOptions cuda = TensorOptions(kFloat32).device(kCUDA);
  std::vector<Tensor> weights;
  for (const Shape& shape : {Shape{16, 3}, Shape{16, 4}, Shape{16}, Shape{16}})
    weights.push_back(randn(shape, {}, &g).to(kCUDA).requires_grad_(true));
  Tensor x = randn({5, 2, 3}, {}, &g).to(kCUDA);
  CudnnLstmOptions cached;
  cached.weight_cache = make_cudnn_weight_cache();
  const CudnnWeightCache& cache = *cached.weight_cache;
  auto output = [&](const CudnnLstmOptions& o) { return lstm_cudnn(x, Tensor(), Tensor(), weights, o).output; };

  Tensor first = output(cached);
  Tensor second = output(cached);
  EXPECT_EQ(cache.packs, 1);
  EXPECT_EQ(cache.reuses, 1);
  expect_allclose(second.cpu(), first.cpu(), 0, 0, "reused");
  // Gradients through a reused space equal those of a call that packs.
  sum(second).backward();
  std::vector<Tensor> reused_grads;
  for (Tensor& w : weights) {
    reused_grads.push_back(w.grad().cpu());
    w.set_grad(Tensor());
  }
  sum(output(CudnnLstmOptions())).backward();
  for (size_t i = 0; i < weights.size(); ++i)
    expect_allclose(reused_grads[i], weights[i].grad().cpu(), 0, 0, "grad " + std::to_string(i));

  // An optimiser step bumps the version counters: the next call repacks, and sees the new values.
  optim::SGD sgd(weights, optim::SGDOptions(0.5));
  sgd.step();
  Tensor after_step = output(cached);
  EXPECT_EQ(cache.packs, 2);
  expect_allclose(after_step.cpu(), output(CudnnLstmOptions()).cpu(), 0, 0, "after the step");
  // Negative control: the step changed the output, so a stale space would have been caught.
  EXPECT_GT(max(abs(sub(after_step, first))).item<double>(), 1e-3);

  // Another autocast type needs another packing.
  {
    amp::AutocastGuard autocast(kCUDA, kBFloat16);
    output(cached);
  }
  EXPECT_EQ(cache.packs, 3);
}

TEST(CudnnLstm, TrainingStepsWithTheCacheMatchTheFusedLstm) {
  SKIP_WITHOUT_CUDNN();
  Generator init(8), init_again(8), data(9);
  nn::LSTMOptions options = nn::LSTMOptions().num_layers(2);
  nn::LSTM cudnn(5, 8, nn::LSTMOptions(options).implementation(LstmImplementation::CuDNN), &init);
  nn::LSTM fused(5, 8, options, &init_again);
  cudnn.to(kCUDA);
  fused.to(kCUDA);
  optim::SGD sgd_cudnn(cudnn.parameters(), optim::SGDOptions(0.1));
  optim::SGD sgd_fused(fused.parameters(), optim::SGDOptions(0.1));
  Tensor x = randn({6, 3, 5}, {}, &data).to(kCUDA);
  for (int step = 0; step < 3; ++step) {
    Tensor a = cudnn.forward(x).output, b = fused.forward(x).output;
    expect_allclose(a.detach().cpu(), b.detach().cpu(), kRtolF32, kAtolF32, "step " + std::to_string(step));
    sum(mul(a, a)).backward();
    sum(mul(b, b)).backward();
    sgd_cudnn.step();
    sgd_fused.step();
    sgd_cudnn.zero_grad();
    sgd_fused.zero_grad();
  }
}

TEST(CudnnLstm, BadInputsAreClearErrors) {
  SKIP_WITHOUT_CUDNN();
  TensorOptions cuda = TensorOptions(kFloat32).device(kCUDA);
  std::vector<Tensor> weights{zeros({8, 3}, cuda), zeros({8, 2}, cuda)};
  Tensor x = zeros({4, 2, 3}, cuda);
  expect_error([&] { lstm_cudnn(x.to(kInt32), Tensor(), Tensor(), weights, CudnnLstmOptions()); },
               {"lstm (cudnn)", "float32, float64, float16 or bfloat16", "int32"});
  expect_error([&] { lstm_cudnn(x, Tensor(), Tensor(), {weights[0]}, CudnnLstmOptions()); },
               {"lstm (cudnn)", "expected 2 weights"});
  expect_error(
      [&] {
        lstm_cudnn(x, Tensor(), Tensor(), {weights[1], weights[1]}, CudnnLstmOptions());
      },
      {"lstm (cudnn)", "weight_ih", "[8, 3]"});
  expect_error(
      [&] {
        lstm_cudnn(x, Tensor(), Tensor(), {weights[0], weights[1].cpu()}, CudnnLstmOptions());
      },
      {"lstm (cudnn)", "same device"});
  expect_error(
      [&] {
        lstm_cudnn(x, zeros({1, 3, 2}, cuda), Tensor(), weights, CudnnLstmOptions());
      },
      {"lstm (cudnn)", "initial state", "[1, 2, 2]"});
  expect_error(
      [&] {
        lstm_cudnn(x, Tensor(), Tensor(), weights, CudnnLstmOptions(), tensor<int64_t>({4, 5}, {2}));
      },
      {"lstm (cudnn)", "sequence length 5", "[0, 4]"});
}

}  // namespace
}  // namespace tapegrad
