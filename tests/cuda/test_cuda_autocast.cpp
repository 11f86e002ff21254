// Autocast on CUDA (bfloat16 and float16): linear and mm lower their products to cuBLAS GEMMs of
// 16-bit operands with float32 sums and return the 16-bit type, as PyTorch's autocast does; the LSTM
// lowers its products and returns its float32 states. Checked against double products
// of the rounded operands computed on the CPU, against the float32 products (close, not equal: the
// negative control), for backward keeping the forward's precision, and for the LSTM against CPU
// autocast (bf16 on both: the same rounding, loose tolerance for the order of the sums). The cases
// skip where no GPU is present and run on the emulated one.
#include <cmath>
#include <vector>

#include "support/gpu.h"
#include "support/reference.h"
#include "support/test_util.h"
#include "tapegrad/core/half.h"

namespace tapegrad {
namespace {

double rounded(float v, DType low) {
  return low == kBFloat16 ? static_cast<float>(BFloat16(v)) : static_cast<float>(Half(v));
}

// A [n, k] B [k, m] of row-major values, each operand rounded to `low` (or not: kFloat32), in double.
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int64_t n, int64_t k, int64_t m,
                            DType low) {
  if (low == kFloat32) return reference::matmul_ref(a, b, n, k, m);
  return reference::matmul_ref(a, b, n, k, m, [low](float v) { return rounded(v, low); });
}

std::vector<float> host(const Tensor& t) {
  return t.to(kCPU).to(kFloat32).contiguous().tolist<float>();
}

// The largest difference beyond the rounding of a 16-bit result (half an ulp: 2^-8 relative for
// bf16, 2^-11 for f16), given the double values it rounds.
double beyond_rounding(const Tensor& t, const std::vector<double>& want, DType low) {
  const std::vector<float> got = host(t);
  const int bits = low == kBFloat16 ? 8 : 11;
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i)
    m = std::max(m, std::fabs(got[i] - want[i]) - std::ldexp(std::fabs(want[i]), -bits));
  return m;
}

double max_diff(const Tensor& t, const std::vector<double>& want) {
  const std::vector<float> got = host(t);
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(got[i] - want[i]));
  return m;
}

TEST(CudaAutocast, LinearProductsInBf16AndF16) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 21, in = 37, out = 18;
  Generator gen(11);
  const Tensor x_cpu = randn({n, in}, {}, &gen), w_cpu = randn({out, in}, {}, &gen), g_cpu = randn({n, out}, {}, &gen);
  const std::vector<float> xv = host(x_cpu), wtv = host(w_cpu.t()), wv = host(w_cpu), gv = host(g_cpu);
  for (DType low : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor x = x_cpu.to(kCUDA).requires_grad_(), w = w_cpu.to(kCUDA).requires_grad_();
    Tensor y;
    {
      amp::AutocastGuard guard(kCUDA, low);
      y = linear(x, w);
    }
    EXPECT_EQ(y.dtype(), low);
    EXPECT_EQ(y.device(), x.device());
    EXPECT_LT(beyond_rounding(y, product(xv, wtv, n, in, out, low), low), 1e-4);
    EXPECT_GT(max_diff(y, product(xv, wtv, n, in, out, kFloat32)), 1e-4);  // the operands were rounded
    sum(y * g_cpu.to(kCUDA)).backward();  // outside the guard: the forward's precision still
    EXPECT_EQ(x.grad().dtype(), kFloat32);
    EXPECT_LT(max_diff(x.grad(), product(gv, wv, n, out, in, low)), 1e-4);
  }
}

TEST(CudaAutocast, OtherDeviceKindsAreUnaffected) {
  SKIP_WITHOUT_GPU();
  Generator gen(12);
  const Tensor a = randn({8, 16}, {}, &gen), b = randn({16, 5}, {}, &gen);
  const std::vector<float> plain = host(mm(a, b));
  amp::AutocastGuard guard(kCUDA, kFloat16);  // CUDA only: CPU products stay float32
  EXPECT_EQ(host(mm(a, b)), plain);
  const Tensor low = mm(a.to(kCUDA), b.to(kCUDA));
  EXPECT_EQ(low.dtype(), kFloat16);
  EXPECT_LT(beyond_rounding(low, product(host(a), host(b), 8, 16, 5, kFloat16), kFloat16), 1e-4);
}

// The generic CUDA LSTM (one GEMM per step) under bf16 autocast against the CPU's under the same
// rounding: the same values up to the order of float sums and the gate functions' last bits.
TEST(CudaAutocast, LstmMatchesCpuAutocast) {
  SKIP_WITHOUT_GPU();
  Generator gen(13);
  const int64_t steps = 6, batch = 4, input = 5, hidden = 8;
  Tensor x = randn({steps, batch, input}, {}, &gen), h0 = zeros({batch, hidden}), c0 = zeros({batch, hidden});
  Tensor w_ih = mul(randn({4 * hidden, input}, {}, &gen), 0.3), w_hh = mul(randn({4 * hidden, hidden}, {}, &gen), 0.3);
  Tensor b_ih = mul(randn({4 * hidden}, {}, &gen), 0.1), b_hh = mul(randn({4 * hidden}, {}, &gen), 0.1);
  auto run = [&](Device device, bool autocast) {
    std::optional<amp::AutocastGuard> guard;
    if (autocast) guard.emplace(device, kBFloat16);
    return lstm_layer(x.to(device), h0.to(device), c0.to(device), w_ih.to(device), w_hh.to(device), b_ih.to(device),
                      b_hh.to(device))
        .output.to(kCPU);
  };
  const Tensor cpu_bf16 = run(kCPU, true), cuda_bf16 = run(kCUDA, true), cuda_f32 = run(kCUDA, false);
  EXPECT_EQ(cuda_bf16.dtype(), kFloat32);
  EXPECT_TRUE(allclose(cuda_bf16, cpu_bf16, 0.0, 1e-5));
  EXPECT_FALSE(allclose(cuda_bf16, cuda_f32, 0.0, 1e-5));  // negative control: the rounding happened
  EXPECT_TRUE(allclose(cuda_bf16, cuda_f32, 0.0, 5e-2));
}

// 16-bit tensors' elementwise ops, reductions and an autocast MLP step on CUDA against the CPU: both
// compute in float and round once, so exact ops agree bit for bit and the rest within one ulp.
TEST(CudaAutocast, SixteenBitOpsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Generator gen(14);
  const Tensor a = randn({33, 70}, {}, &gen), b = randn({33, 70}, {}, &gen);
  for (DType low : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(low));
    const Tensor la = a.to(low), lb = b.to(low), ga = la.to(kCUDA), gb = lb.to(kCUDA);
    EXPECT_EQ(host(relu(ga)), host(relu(la)));
    EXPECT_EQ(host(ga + gb), host(la + lb));
    EXPECT_EQ(host(ga * gb), host(la * lb));
    EXPECT_EQ(host(where(gt(ga, gb), ga, gb)), host(where(gt(la, lb), la, lb)));
    const double ulp = low == kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    EXPECT_TRUE(allclose(tanh(ga).to(kCPU).to(kFloat32), tanh(la).to(kFloat32), ulp, 1e-6));
    EXPECT_TRUE(allclose(sum(ga, {1}).to(kCPU).to(kFloat32), sum(la, {1}).to(kFloat32), ulp, 1e-3));
    EXPECT_TRUE(allclose(softmax(ga, 1).to(kCPU).to(kFloat32), softmax(la, 1).to(kFloat32), ulp, 1e-6));
  }
  // One autocast forward and backward of Linear-ReLU-Linear and cross_entropy on both devices.
  const Tensor x = randn({16, 30}, {}, &gen), w1 = randn({40, 30}, {}, &gen) * 0.2, w2 = randn({5, 40}, {}, &gen) * 0.2;
  const Tensor target = randint(0, 5, {16}, TensorOptions(kInt64), &gen);
  auto step = [&](Device device) {
    Tensor p1 = w1.to(device).detach().requires_grad_(), p2 = w2.to(device).detach().requires_grad_();
    Tensor loss;
    {
      amp::AutocastGuard guard(device, kBFloat16);
      Tensor h = relu(linear(x.to(device), p1));
      EXPECT_EQ(h.dtype(), kBFloat16);
      loss = cross_entropy(linear(h, p2), target.to(device));
      EXPECT_EQ(loss.dtype(), kFloat32);
    }
    loss.backward();
    EXPECT_EQ(p1.grad().dtype(), kFloat32);
    return std::vector<Tensor>{loss.to(kCPU), p1.grad().to(kCPU), p2.grad().to(kCPU)};
  };
  const std::vector<Tensor> cpu = step(kCPU), gpu = step(kCUDA);
  for (size_t i = 0; i < cpu.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(allclose(gpu[i], cpu[i], 2e-2, 1e-3));
  }
}

TEST(CudaAutocast, BadDtypesAreClearErrors) {
  testing::expect_error([] { amp::AutocastGuard g(kCUDA, kFloat64); }, {"AutocastGuard", "cuda", "float64"});
}

}  // namespace
}  // namespace tapegrad
