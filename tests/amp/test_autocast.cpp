// Autocast on the CPU: the guard's scoping (nesting, threads, enabled = false, bad arguments) and
// the LSTM under it, whose recurrent products run on bf16-rounded operands with f32 sums: against a
// reference written here from the LSTM's equations with the same rounding, against the f32 LSTM
// (close, and not equal: the negative control), gradients, and nothing changed outside the guard.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "cpu/gemm/sbgemm.h"
#include "support/test_util.h"
#include "support/thread_count.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

double bf16(double v) {
  return static_cast<float>(BFloat16(static_cast<float>(v)));
}
double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}

// One LSTM layer by its equations, products of bf16-rounded operands summed in double, the rest in
// double: out[t][b][j] = h_t. x [T, B, I]; weights as PyTorch lays them out.
std::vector<double> reference_layer(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                    const Tensor& b_hh) {
  const int64_t steps = x.size(0), batch = x.size(1), input = x.size(2), hidden = w_hh.size(1);
  const auto xv = x.contiguous().tolist<float>(), wi = w_ih.contiguous().tolist<float>();
  const auto wh = w_hh.contiguous().tolist<float>(), bi = b_ih.tolist<float>(), bh = b_hh.tolist<float>();
  std::vector<double> h(static_cast<size_t>(batch * hidden), 0.0), c = h, out;
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<double> h_new = h, c_new = c;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> z(static_cast<size_t>(4 * hidden));
      for (int64_t g = 0; g < 4 * hidden; ++g) {
        double sum = static_cast<double>(bi[static_cast<size_t>(g)]) + bh[static_cast<size_t>(g)];
        for (int64_t i = 0; i < input; ++i)
          sum +=
              bf16(xv[static_cast<size_t>((t * batch + b) * input + i)]) * bf16(wi[static_cast<size_t>(g * input + i)]);
        for (int64_t k = 0; k < hidden; ++k)
          sum += bf16(h[static_cast<size_t>(b * hidden + k)]) * bf16(wh[static_cast<size_t>(g * hidden + k)]);
        z[static_cast<size_t>(g)] = sum;
      }
      for (int64_t j = 0; j < hidden; ++j) {
        const double ig = sigmoid(z[static_cast<size_t>(j)]), fg = sigmoid(z[static_cast<size_t>(hidden + j)]);
        const double gg = std::tanh(z[static_cast<size_t>(2 * hidden + j)]);
        const double og = sigmoid(z[static_cast<size_t>(3 * hidden + j)]);
        const size_t r = static_cast<size_t>(b * hidden + j);
        c_new[r] = fg * c[r] + ig * gg;
        h_new[r] = og * std::tanh(c_new[r]);
      }
    }
    h = h_new, c = c_new;
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

struct Layer {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh;
  Layer(int64_t steps, int64_t batch, int64_t input, int64_t hidden) {
    Generator g(21);
    x = randn({steps, batch, input}, {}, &g);
    h0 = zeros({batch, hidden}), c0 = zeros({batch, hidden});
    w_ih = randn({4 * hidden, input}, {}, &g) * 0.3, w_hh = randn({4 * hidden, hidden}, {}, &g) * 0.3;
    b_ih = randn({4 * hidden}, {}, &g) * 0.1, b_hh = randn({4 * hidden}, {}, &g) * 0.1;
  }
  LstmLayerOutput run(const Tensor& lengths = Tensor()) const {
    return lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths);
  }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(Autocast, GuardScopesNestAndRestore) {
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CPU));
  EXPECT_EQ(amp::product_dtype(kCPU, kFloat32), kFloat32);
  {
    amp::AutocastGuard on(kCPU, kBFloat16);
    EXPECT_TRUE(amp::is_autocast_enabled(DeviceKind::CPU));
    EXPECT_EQ(amp::product_dtype(kCPU, kFloat32), kBFloat16);
    EXPECT_EQ(amp::product_dtype(kCPU, kFloat64), kFloat64);  // only float32 is lowered, as in PyTorch
    EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CUDA));
    {
      amp::AutocastGuard off(kCPU, kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CPU));
      EXPECT_EQ(amp::product_dtype(kCPU, kFloat32), kFloat32);
    }
    EXPECT_TRUE(amp::is_autocast_enabled(DeviceKind::CPU));
  }
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CPU));
}

TEST(Autocast, IsPerThread) {
  amp::AutocastGuard on(kCPU, kBFloat16);
  bool other_thread_sees_it = true;
  std::thread([&] { other_thread_sees_it = amp::is_autocast_enabled(DeviceKind::CPU); }).join();
  EXPECT_FALSE(other_thread_sees_it);
  EXPECT_TRUE(amp::is_autocast_enabled(DeviceKind::CPU));
}

TEST(Autocast, BadArgumentsAreClearErrors) {
  tapegrad::testing::expect_error([] { amp::AutocastGuard g(kCPU, kFloat16); },
                                  {"AutocastGuard", "bfloat16", "float16"});
  tapegrad::testing::expect_error([] { amp::AutocastGuard g(kCUDA, kInt32); }, {"AutocastGuard", "cuda", "int32"});
  amp::AutocastGuard disabled(kCUDA, kFloat16, /*enabled=*/false);  // turning it off is always allowed
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceKind::CUDA));
}

// Every product path the CPU has (AMX, AVX512-BF16, the portable one always) against the
// reference; the f32 LSTM is close but measurably different (the rounding happened).
TEST(Autocast, LstmProductsRunInBf16) {
  Layer layer(6, 5, 7, 9);
  const std::vector<double> want = reference_layer(layer.x, layer.w_ih, layer.w_hh, layer.b_ih, layer.b_hh);
  const std::vector<float> f32 = layer.run().output.contiguous().tolist<float>();
  for (cpu::SbgemmKernel kernel :
       {cpu::SbgemmKernel::Portable, cpu::SbgemmKernel::Avx512Bf16, cpu::SbgemmKernel::Amx}) {
    if (kernel > cpu::sbgemm_best_kernel()) continue;
    SCOPED_TRACE(cpu::sbgemm_kernel_name(kernel));
    cpu::sbgemm_limit_kernel(kernel);
    std::vector<float> got;
    {
      amp::AutocastGuard guard(kCPU, kBFloat16);
      LstmLayerOutput out = layer.run();
      EXPECT_EQ(out.output.dtype(), kFloat32);  // the f32 sums, not bf16 tensors (amp/autocast.h)
      got = out.output.contiguous().tolist<float>();
    }
    cpu::sbgemm_limit_kernel(cpu::SbgemmKernel::Amx);
    EXPECT_LT(max_abs_diff(got, want), 2e-5);
    // Negative control: bf16 rounding of operands moves the result far more than f32 sums do.
    EXPECT_GT(max_abs_diff(f32, want), 1e-4);
    EXPECT_LT(max_abs_diff(f32, want), 5e-2);
  }
  // Outside the guard the LSTM is the f32 one again, bit for bit.
  EXPECT_EQ(layer.run().output.contiguous().tolist<float>(), f32);
}

TEST(Autocast, LstmWithLengthsAndTwoThreads) {
  Layer layer(7, 12, 5, 8);
  Tensor lengths = tensor(std::vector<int64_t>{7, 3, 0, 5, 7, 1, 2, 6, 4, 7, 3, 5}, {12});
  Tensor f32, bf;
  {
    tapegrad::testing::ThreadCount two_threads(2);
    f32 = layer.run(lengths).output;
    amp::AutocastGuard guard(kCPU, kBFloat16);
    bf = layer.run(lengths).output;
  }
  EXPECT_TRUE(allclose(bf, f32, 0.0, 5e-2));
  // Padded steps stay exactly zero.
  EXPECT_EQ(bf.select(1, 2).abs().sum().item(), 0.0);
  EXPECT_EQ(bf.narrow(0, 3, 4).select(1, 1).abs().sum().item(), 0.0);
}

// Backward through the bf16 recurrence: f32 gradients for every input, close to the f32 LSTM's.
TEST(Autocast, LstmGradientsAreFloatAndClose) {
  Layer layer(5, 4, 6, 8);
  for (Tensor* t : {&layer.x, &layer.w_ih, &layer.w_hh, &layer.b_ih, &layer.b_hh}) t->requires_grad_();
  auto grads = [&](bool autocast) {
    for (Tensor* t : {&layer.x, &layer.w_ih, &layer.w_hh, &layer.b_ih, &layer.b_hh}) t->set_grad(Tensor());
    {
      std::optional<amp::AutocastGuard> guard;
      if (autocast) guard.emplace(kCPU, kBFloat16);
      LstmLayerOutput out = layer.run();
      (sum(square(out.output)) + sum(out.c_n)).backward();
    }
    std::vector<Tensor> g;
    for (Tensor* t : {&layer.x, &layer.w_ih, &layer.w_hh, &layer.b_ih, &layer.b_hh}) g.push_back(t->grad().clone());
    return g;
  };
  std::vector<Tensor> f32 = grads(false), bf = grads(true);
  for (size_t i = 0; i < f32.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(bf[i].dtype(), kFloat32);
    const double scale = f32[i].abs().max().item();
    EXPECT_LT((bf[i] - f32[i]).abs().max().item(), 3e-2 * scale + 1e-4);
  }
}

// nn::LSTM (two layers) trains under the guard: the loss of a few Adam steps falls as in f32.
TEST(Autocast, LstmModuleTrainsUnderTheGuard) {
  Generator g(3);
  nn::LSTM lstm(4, 16, nn::LSTMOptions().num_layers(2), &g);
  optim::Adam opt(lstm.parameters(), optim::AdamOptions(1e-2));
  Tensor x = randn({10, 8, 4}, {}, &g), target = randn({8, 16}, {}, &g) * 0.5;
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    amp::AutocastGuard guard(kCPU, kBFloat16);
    Tensor loss = mean(square(lstm.forward(x).h_n.select(0, 1) - target));
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.5 * first);
}
