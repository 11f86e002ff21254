// Autocast's matrix products on the CPU (mm, addmm, matmul, linear): under the guard each product
// runs on bf16-rounded operands with float32 sums and returns bf16 (the sums rounded once), forward
// and backward, on every product kernel the CPU has; gradients come in their inputs' dtypes. Checked against double
// products of the rounded operands written here, against the float32 products (close, not equal: the negative control),
// and for the rule that backward keeps the precision its forward chose whatever autocast says when backward runs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/gemm/sbgemm.h"
#include "support/reference.h"
#include "support/thread_count.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

double bf16(float v) {
  return static_cast<float>(BFloat16(v));
}

// C = A B of [n, k] and [k, m] row-major values, each operand rounded to bf16 or not, in double.
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int64_t n, int64_t k, int64_t m,
                            bool rounded) {
  if (rounded) return reference::matmul_ref(a, b, n, k, m, bf16);
  return reference::matmul_ref(a, b, n, k, m);
}

double max_diff(const Tensor& t, const std::vector<double>& want) {
  const std::vector<float> got = t.to(kFloat32).contiguous().tolist<float>();
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(got[i] - want[i]));
  return m;
}

std::vector<float> values(const Tensor& t) {
  return t.to(kFloat32).contiguous().tolist<float>();
}

// How many elements of a bf16 result are farther from `want` than rounding to bf16 (half an ulp,
// 2^-8 relative) plus the float32 sums' own error allows.
int64_t beyond_bf16_rounding(const Tensor& t, const std::vector<double>& want) {
  EXPECT_EQ(t.dtype(), kBFloat16);
  const std::vector<float> got = values(t);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    bad += std::fabs(got[i] - want[i]) > std::ldexp(std::fabs(want[i]), -8) + 1e-4;
  return bad;
}

constexpr cpu::SbgemmKernel kKernels[] = {cpu::SbgemmKernel::Portable, cpu::SbgemmKernel::Avx512Bf16,
                                          cpu::SbgemmKernel::Amx};

struct KernelLimit {
  explicit KernelLimit(cpu::SbgemmKernel k) { cpu::sbgemm_limit_kernel(k); }
  ~KernelLimit() { cpu::sbgemm_limit_kernel(cpu::SbgemmKernel::Amx); }
};

}  // namespace

// linear(x, W, b) = x W^T + b, and its gradients dx = g W and dW = g^T x, with every product of
// rounded operands; backward runs after the guard has closed.
TEST(AutocastProducts, LinearForwardAndBackwardInBf16) {
  const int64_t n = 37, in = 45, out = 26;
  Generator gen(5);
  Tensor x = randn({n, in}, {}, &gen).requires_grad_(), w = randn({out, in}, {}, &gen).requires_grad_();
  Tensor b = randn({out}, {}, &gen).requires_grad_(), g = randn({n, out}, {}, &gen);
  const std::vector<float> xv = values(x), wtv = values(w.t()), wv = values(w), gv = values(g), gtv = values(g.t());
  const std::vector<float> bv = values(b.to(kBFloat16));  // cast to bf16 first, as PyTorch does
  std::vector<double> want_y = product(xv, wtv, n, in, out, true), exact_y = product(xv, wtv, n, in, out, false);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      want_y[static_cast<size_t>(i * out + j)] += bv[static_cast<size_t>(j)];
      exact_y[static_cast<size_t>(i * out + j)] += bv[static_cast<size_t>(j)];
    }
  const std::vector<double> want_dx = product(gv, wv, n, out, in, true), want_dw = product(gtv, xv, out, n, in, true);
  const std::vector<double> exact_dw = product(gtv, xv, out, n, in, false);
  for (cpu::SbgemmKernel kernel : kKernels) {
    if (kernel > cpu::sbgemm_best_kernel()) continue;
    SCOPED_TRACE(cpu::sbgemm_kernel_name(kernel));
    KernelLimit limit(kernel);
    x.set_grad(Tensor()), w.set_grad(Tensor()), b.set_grad(Tensor());
    Tensor y;
    {
      amp::AutocastGuard guard(kCPU, kBFloat16);
      y = linear(x, w, b);
    }
    EXPECT_EQ(beyond_bf16_rounding(y, want_y), 0);  // bf16, as PyTorch's autocast returns
    EXPECT_GT(max_diff(y, exact_y), 1e-3);
    sum(y * g).backward();
    EXPECT_EQ(x.grad().dtype(), kFloat32);  // each gradient in its input's dtype
    EXPECT_EQ(w.grad().dtype(), kFloat32);
    EXPECT_EQ(b.grad().dtype(), kFloat32);
    EXPECT_LT(max_diff(x.grad(), want_dx), 1e-4);
    EXPECT_LT(max_diff(w.grad(), want_dw), 1e-4);
    EXPECT_GT(max_diff(w.grad(), exact_dw), 1e-3);  // negative control: the operands were rounded
    // y's gradient reached linear as bf16 (y's dtype); db sums those values in float32.
    const std::vector<float> db = values(g.to(kBFloat16).to(kFloat32).sum(0));
    EXPECT_LT(max_diff(b.grad(), std::vector<double>(db.begin(), db.end())), 1e-4);
  }
}

// A forward outside the guard keeps float32 products in a backward run inside one, bit for bit.
TEST(AutocastProducts, BackwardKeepsTheForwardsPrecision) {
  Generator gen(6);
  Tensor x = randn({20, 33}, {}, &gen).requires_grad_(), w = randn({17, 33}, {}, &gen);
  Tensor g = randn({20, 17}, {}, &gen);
  sum(linear(x, w) * g).backward();
  const std::vector<float> plain = values(x.grad());
  x.set_grad(Tensor());
  Tensor y = linear(x, w);
  {
    amp::AutocastGuard guard(kCPU, kBFloat16);
    sum(y * g).backward();
  }
  EXPECT_EQ(values(x.grad()), plain);
}

TEST(AutocastProducts, MmAddmmAndMatmul) {
  Generator gen(7);
  const int64_t n = 19, k = 50, m = 23;
  Tensor a = randn({n, k}, {}, &gen).requires_grad_(), b = randn({k, m}, {}, &gen).requires_grad_();
  Tensor bias = randn({m}, {}, &gen), g = randn({n, m}, {}, &gen);
  const std::vector<double> want = product(values(a), values(b), n, k, m, true);
  const std::vector<double> want_da = product(values(g), values(b.t()), n, m, k, true);
  Tensor c, d, e;
  {
    amp::AutocastGuard guard(kCPU, kBFloat16);
    c = mm(a, b);
    d = addmm(bias, a, b, 1.0, 2.0);
    e = matmul(a.unsqueeze(0).expand({3, n, k}), b);  // folded into one mm
  }
  EXPECT_EQ(beyond_bf16_rounding(c, want), 0);
  std::vector<double> want_d = want;
  const std::vector<float> bias_v = values(bias.to(kBFloat16));  // cast to bf16 first, as PyTorch does
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      want_d[static_cast<size_t>(i * m + j)] =
          2.0 * want[static_cast<size_t>(i * m + j)] + bias_v[static_cast<size_t>(j)];
  EXPECT_EQ(beyond_bf16_rounding(d, want_d), 0);
  EXPECT_EQ(beyond_bf16_rounding(e.select(0, 2), want), 0);
  sum(c * g).backward();  // mm's backward: two products in the forward's precision
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_LT(max_diff(a.grad(), want_da), 1e-4);
  EXPECT_GT(max_diff(a.grad(), product(values(g), values(b.t()), n, m, k, false)), 1e-3);
}

// Note [the bias in the float32 sums] (cpu/gemm.cpp): linear's bias goes into the float32 sums of a
// bf16 output instead of through the output; the bits are addmm's, which copies the bias into its
// output first, on the plain path (one and two threads, float32 and bf16 biases) and on the path
// of products computed transposed, which keeps the copy.
TEST(AutocastProducts, LinearBiasHasAddmmsBits) {
  Generator gen(11);
  struct Shape3 {
    int64_t n, k, m;
  };
  for (Shape3 s : {Shape3{300, 200, 150}, Shape3{64, 1000, 512}, Shape3{2, 3, 5}})
    for (int threads : {1, 2})
      for (DType bias_type : {kFloat32, kBFloat16}) {
        SCOPED_TRACE(::testing::Message()
                     << s.n << " x " << s.k << " x " << s.m << ", " << threads << " threads, " << bias_type << " bias");
        tapegrad::testing::ThreadCount thread_count(threads);
        const Tensor x = randn({s.n, s.k}, {}, &gen), w = randn({s.m, s.k}, {}, &gen);
        const Tensor bias = randn({s.m}, {}, &gen).to(bias_type);
        Tensor got, want;
        {
          amp::AutocastGuard guard(kCPU, kBFloat16);
          got = linear(x, w, bias);
          want = addmm(bias, x, w.t());
        }
        ASSERT_EQ(got.dtype(), kBFloat16);
        EXPECT_EQ(values(got), values(want));
      }
}

// Only float32 is lowered: float64 products are the same with and without the guard.
TEST(AutocastProducts, Float64IsUntouched) {
  Generator gen(8);
  Tensor x = randn({9, 12}, TensorOptions(kFloat64), &gen), w = randn({5, 12}, TensorOptions(kFloat64), &gen);
  const std::vector<double> plain = linear(x, w).tolist<double>();
  amp::AutocastGuard guard(kCPU, kBFloat16);
  EXPECT_EQ(linear(x, w).tolist<double>(), plain);
  EXPECT_EQ(mm(x, w.t()).tolist<double>(), plain);
}
