// Matrix products on the GPU (cuBLAS) against the CPU (OpenBLAS) on the same inputs: mm, bmm,
// matmul, addmm and linear, with every transposition, non-contiguous and broadcast operands,
// f32/f64 and f16/bf16, alpha/beta accumulation, sizes from 1x1x1 to 1024, TF32 off and on.
// The GPU cases skip where no GPU is present; the TF32 switch is tested everywhere.
#include <cmath>
#include <functional>
#include <string>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/random_values.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

Tensor uniform_cpu(const Shape& shape, uint64_t seed, DType dtype = kFloat32) {
  return testing::uniform(shape, dtype, seed);
}

void expect_near(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  testing::expect_allclose(got, want, {rtol, atol}, what);
}

// The tolerance of an f32 product with inner size k against an f64 reference.
double f32_atol(int64_t k) {
  return 1e-5 + 1e-6 * static_cast<double>(k);
}

// Restores the TF32 setting however a test ends.
struct Tf32Guard {
  explicit Tf32Guard(bool allow) : previous(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Guard() { cuda::set_allow_tf32(previous); }
  bool previous;
};

TEST(CudaBlasSettings, Tf32IsOffByDefaultAndToggles) {
  EXPECT_FALSE(cuda::allow_tf32());
  {
    Tf32Guard on(true);
    EXPECT_TRUE(cuda::allow_tf32());
  }
  EXPECT_FALSE(cuda::allow_tf32());
}

struct MmCase {
  int64_t n, k, m;
};

void PrintTo(const MmCase& c, std::ostream* os) {
  *os << c.n << "x" << c.k << "x" << c.m;
}

class CudaMm : public ::testing::TestWithParam<MmCase> {};

// a [n, k] and b [k, m], each stored plainly or as the transpose of its transpose.
TEST_P(CudaMm, EveryTranspositionMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const MmCase c = GetParam();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = ta ? uniform_cpu({c.k, c.n}, 1).t() : uniform_cpu({c.n, c.k}, 1);
      Tensor b = tb ? uniform_cpu({c.m, c.k}, 2).t() : uniform_cpu({c.k, c.m}, 2);
      Tensor want = mm(a.to(kFloat64), b.to(kFloat64));
      // Moving to the GPU keeps the layout only for contiguous tensors, so transpose there.
      Tensor a_gpu = ta ? a.t().contiguous().to(kCUDA).t() : a.to(kCUDA);
      Tensor b_gpu = tb ? b.t().contiguous().to(kCUDA).t() : b.to(kCUDA);
      std::string what = "mm " + std::to_string(c.n) + "x" + std::to_string(c.k) + "x" + std::to_string(c.m) +
                         (ta ? " a^T" : "") + (tb ? " b^T" : "");
      expect_near(mm(a_gpu, b_gpu), want, f32_atol(c.k), 1e-5, what + " f32");
      expect_near(mm(a_gpu.to(kFloat64), b_gpu.to(kFloat64)), want, 1e-12 * (1 + c.k), 1e-12, what + " f64");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaMm,
                         ::testing::Values(MmCase{1, 1, 1}, MmCase{1, 7, 1}, MmCase{3, 5, 7}, MmCase{17, 33, 9},
                                           MmCase{1, 64, 130}, MmCase{130, 64, 1}, MmCase{64, 128, 32},
                                           MmCase{257, 129, 65}, MmCase{1024, 1024, 1024}));

TEST(CudaMm, SixteenBitTypesAccumulateInFloat32) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {kFloat16, kBFloat16}) {
    for (int64_t k : {1, 37, 512}) {
      Tensor a = uniform_cpu({45, k}, 3).to(dtype), b = uniform_cpu({k, 67}, 4).to(dtype);
      // The CPU reference multiplies the same rounded values in f32; only the output rounding differs.
      Tensor want = mm(a.to(kFloat32), b.to(kFloat32));
      const double rtol = dtype == kFloat16 ? 2e-3 : 1.6e-2;
      Tensor got = mm(a.to(kCUDA), b.to(kCUDA));
      EXPECT_EQ(got.dtype(), dtype);
      expect_near(got, want, rtol * std::sqrt(static_cast<double>(k)) * 0.1 + rtol, rtol,
                  std::string("mm ") + dtype_name(dtype) + " k=" + std::to_string(k));
      Tensor got_t = mm(b.to(kCUDA).t(), a.to(kCUDA).t());  // (a b)^T = b^T a^T from transposed views
      expect_near(got_t, want.t(), rtol * std::sqrt(static_cast<double>(k)) * 0.1 + rtol, rtol,
                  std::string("mm transposed ") + dtype_name(dtype));
    }
  }
}

TEST(CudaMm, Tf32OnStaysCloseAndOffStaysExact) {
  SKIP_WITHOUT_GPU();
  Tensor a = uniform_cpu({512, 1024}, 5), b = uniform_cpu({1024, 256}, 6);
  Tensor want = mm(a.to(kFloat64), b.to(kFloat64));
  Tensor a_gpu = a.to(kCUDA), b_gpu = b.to(kCUDA);
  {
    Tf32Guard off(false);
    expect_near(mm(a_gpu, b_gpu), want, f32_atol(1024), 1e-5, "tf32 off");
  }
  {
    Tf32Guard on(true);
    // TF32 keeps 10 mantissa bits: each product is off by ~1e-3 relative.
    expect_near(mm(a_gpu, b_gpu), want, 5e-2, 1e-2, "tf32 on");
  }
}

TEST(CudaMm, NonContiguousOperands) {
  SKIP_WITHOUT_GPU();
  Tensor big_a = uniform_cpu({40, 50}, 7), big_b = uniform_cpu({60, 30}, 8);
  // Row stride larger than the row (a window), every other column (neither stride 1), a column
  // vector, and a broadcast (stride 0) operand.
  auto both = [&](const std::function<Tensor(const Tensor&)>& fa, const std::function<Tensor(const Tensor&)>& fb,
                  const std::string& name) {
    Tensor a_cpu = fa(big_a), b_cpu = fb(big_b);
    Tensor a_gpu = fa(big_a.to(kCUDA)), b_gpu = fb(big_b.to(kCUDA));
    expect_near(mm(a_gpu, b_gpu), mm(a_cpu.to(kFloat64), b_cpu.to(kFloat64)), f32_atol(a_cpu.size(1)), 1e-5, name);
  };
  both([](const Tensor& t) { return t.narrow(0, 3, 20).narrow(1, 5, 30); },
       [](const Tensor& t) { return t.narrow(0, 10, 30).narrow(1, 2, 11); }, "windows");
  both([](const Tensor& t) { return t.slice(1, 0, 50, 2).slice(0, 0, 40, 3); },
       [](const Tensor& t) { return t.slice(0, 0, 50, 2); }, "strided slices (copied)");
  both([](const Tensor& t) { return t.t().narrow(0, 0, 25); },
       [](const Tensor& t) { return t.slice(0, 1, 41, 1).slice(1, 0, 30, 3); }, "transposed window and step 3");
  both([](const Tensor& t) { return t.narrow(1, 7, 1).t(); },  // [1, 40] with strides (1, 50)
       [](const Tensor& t) { return t.narrow(0, 0, 40).narrow(1, 4, 1); }, "row times column");
  both(
      [](const Tensor& t) {
        return t.narrow(0, 0, 1).expand({9, 50});
      },
      [](const Tensor& t) {
        return t.narrow(0, 0, 50).narrow(1, 0, 1).expand({50, 4});
      },
      "broadcast rows");
}

TEST(CudaMm, EmptyInnerOrOuterDims) {
  SKIP_WITHOUT_GPU();
  Tensor z = mm(zeros({3, 0}, kCUDA), zeros({0, 4}, kCUDA));
  expect_near(z, zeros({3, 4}), 0, 0, "k = 0 gives zeros");
  EXPECT_EQ(mm(zeros({0, 5}, kCUDA), zeros({5, 4}, kCUDA)).sizes(), (Shape{0, 4}));
  EXPECT_EQ(mm(zeros({3, 5}, kCUDA), zeros({5, 0}, kCUDA)).sizes(), (Shape{3, 0}));
  Tensor input = uniform_cpu({3, 4}, 9);
  expect_near(addmm(input.to(kCUDA), zeros({3, 0}, kCUDA), zeros({0, 4}, kCUDA), 0.5), mul(input, 0.5), 1e-7, 0,
              "k = 0 scales the input by beta");
  expect_near(addmm(input.to(kCUDA), zeros({3, 0}, kCUDA), zeros({0, 4}, kCUDA), 1.0), input, 0, 0,
              "k = 0 with beta 1 keeps the input");
}

TEST(CudaAddmm, AlphaBetaAccumulation) {
  SKIP_WITHOUT_GPU();
  Tensor a = uniform_cpu({33, 17}, 10), b = uniform_cpu({17, 21}, 11);
  for (Tensor input : {uniform_cpu({33, 21}, 12), uniform_cpu({21}, 13), uniform_cpu({33, 1}, 14)}) {
    for (double beta : {0.0, 1.0, 0.5, -2.0}) {
      for (double alpha : {1.0, -1.5, 0.0}) {
        Tensor want = addmm(input.to(kFloat64), a.to(kFloat64), b.to(kFloat64), beta, alpha);
        std::string what = "addmm input " + shape_str(input.sizes()) + " beta " + std::to_string(beta) + " alpha " +
                           std::to_string(alpha);
        expect_near(addmm(input.to(kCUDA), a.to(kCUDA), b.to(kCUDA), beta, alpha), want, f32_atol(17), 1e-5, what);
        expect_near(addmm(input.to(kCUDA), a.t().contiguous().to(kCUDA).t(), b.to(kCUDA), beta, alpha), want,
                    f32_atol(17), 1e-5, what + " a^T");
      }
    }
  }
}

TEST(CudaBmm, TranspositionsAndPermutedBatches) {
  SKIP_WITHOUT_GPU();
  const int64_t B = 6, n = 19, k = 23, m = 11;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = ta ? uniform_cpu({B, k, n}, 15).transpose(1, 2) : uniform_cpu({B, n, k}, 15);
      Tensor b = tb ? uniform_cpu({B, m, k}, 16).transpose(1, 2) : uniform_cpu({B, k, m}, 16);
      Tensor a_gpu = ta ? a.transpose(1, 2).contiguous().to(kCUDA).transpose(1, 2) : a.to(kCUDA);
      Tensor b_gpu = tb ? b.transpose(1, 2).contiguous().to(kCUDA).transpose(1, 2) : b.to(kCUDA);
      std::string what = std::string("bmm") + (ta ? " a^T" : "") + (tb ? " b^T" : "");
      expect_near(bmm(a_gpu, b_gpu), bmm(a.to(kFloat64), b.to(kFloat64)), f32_atol(k), 1e-5, what);
      expect_near(bmm(a_gpu.to(kFloat64), b_gpu.to(kFloat64)), bmm(a.to(kFloat64), b.to(kFloat64)), 1e-12, 1e-12,
                  what + " f64");
    }
  }
  // Batch as the middle dim ([n, B, k] permuted to [B, n, k]: batch stride k, row stride B*k).
  Tensor x = uniform_cpu({n, B, k}, 17), y = uniform_cpu({B, k, m}, 18);
  expect_near(bmm(x.to(kCUDA).permute({1, 0, 2}), y.to(kCUDA)), bmm(x.permute({1, 0, 2}).to(kFloat64), y.to(kFloat64)),
              f32_atol(k), 1e-5, "permuted batch");
  // Every other column: copied to contiguous first.
  Tensor w = uniform_cpu({B, n, 2 * k}, 19);
  expect_near(bmm(w.to(kCUDA).slice(2, 0, 2 * k, 2), y.to(kCUDA)),
              bmm(w.slice(2, 0, 2 * k, 2).to(kFloat64), y.to(kFloat64)), f32_atol(k), 1e-5, "strided columns");
}

TEST(CudaMatmul, BroadcastBatchAndLargeBatches) {
  SKIP_WITHOUT_GPU();
  // [1, n, k] x [B, k, m]: the left operand is one matrix used by every batch (batch stride 0).
  Tensor a = uniform_cpu({1, 13, 29}, 20), b = uniform_cpu({7, 29, 5}, 21);
  expect_near(matmul(a.to(kCUDA), b.to(kCUDA)), matmul(a.to(kFloat64), b.to(kFloat64)), f32_atol(29), 1e-5,
              "broadcast left");
  expect_near(matmul(b.transpose(1, 2).to(kCUDA), a.transpose(1, 2).to(kCUDA)),
              matmul(b.transpose(1, 2).to(kFloat64), a.transpose(1, 2).to(kFloat64)), f32_atol(29), 1e-5,
              "broadcast right, transposed");
  // Two broadcast batch dims.
  Tensor c = uniform_cpu({4, 1, 6, 8}, 22), d = uniform_cpu({1, 3, 8, 2}, 23);
  expect_near(matmul(c.to(kCUDA), d.to(kCUDA)), matmul(c.to(kFloat64), d.to(kFloat64)), f32_atol(8), 1e-5,
              "two broadcast dims");
  // A broadcast operand that also needs a copy (neither stride 1): only one matrix is copied.
  Tensor e = uniform_cpu({1, 12, 40}, 24).slice(2, 0, 40, 2);
  Tensor f = uniform_cpu({5, 20, 3}, 25);
  expect_near(matmul(e.to(kCUDA), f.to(kCUDA)), matmul(e.to(kFloat64), f.to(kFloat64)), f32_atol(20), 1e-5,
              "broadcast and copied");
  // Many small matrices, and vectors promoted by matmul.
  Tensor g = uniform_cpu({3000, 4, 3}, 26), h = uniform_cpu({3000, 3, 2}, 27);
  expect_near(matmul(g.to(kCUDA), h.to(kCUDA)), matmul(g.to(kFloat64), h.to(kFloat64)), f32_atol(3), 1e-5,
              "3000 batches");
  Tensor v = uniform_cpu({29}, 28);
  expect_near(matmul(b.to(kCUDA).transpose(1, 2), v.to(kCUDA)), matmul(b.transpose(1, 2).to(kFloat64), v.to(kFloat64)),
              f32_atol(29), 1e-5, "batched matrix-vector");
  expect_near(matmul(v.to(kCUDA), v.to(kCUDA)), matmul(v.to(kFloat64), v.to(kFloat64)), f32_atol(29), 1e-5, "dot");
}

TEST(CudaBmm, SixteenBitTypes) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {kFloat16, kBFloat16}) {
    Tensor a = uniform_cpu({5, 31, 64}, 29).to(dtype), b = uniform_cpu({5, 64, 17}, 30).to(dtype);
    Tensor want = bmm(a.to(kFloat32), b.to(kFloat32));
    const double rtol = dtype == kFloat16 ? 2e-3 : 1.6e-2;
    expect_near(bmm(a.to(kCUDA), b.to(kCUDA)), want, 2 * rtol, rtol, std::string("bmm ") + dtype_name(dtype));
    expect_near(matmul(a.narrow(0, 0, 1).to(kCUDA), b.to(kCUDA)),
                bmm(a.narrow(0, 0, 1).expand({5, 31, 64}).to(kFloat32), b.to(kFloat32)), 2 * rtol, rtol,
                std::string("broadcast bmm ") + dtype_name(dtype));
  }
}

// linear forward and backward (whose GEMMs read transposed views) on both devices.
TEST(CudaLinear, ForwardAndGradientsMatchCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform_cpu({4, 9, 37}, 31), w = uniform_cpu({23, 37}, 32), bias = uniform_cpu({23}, 33);
  Tensor upstream = uniform_cpu({4, 9, 23}, 34);
  auto run = [&](Device device, Tensor* gx, Tensor* gw, Tensor* gb) {
    Tensor xd = x.detach().to(device).requires_grad_(), wd = w.detach().to(device).requires_grad_(),
           bd = bias.detach().to(device).requires_grad_();
    Tensor y = linear(xd, wd, bd);
    sum(mul(y, upstream.to(device))).backward();
    *gx = xd.grad();
    *gw = wd.grad();
    *gb = bd.grad();
    return y;
  };
  Tensor cx, cw, cb, gx, gw, gb;
  Tensor y_cpu = run(kCPU, &cx, &cw, &cb);
  Tensor y_gpu = run(kCUDA, &gx, &gw, &gb);
  expect_near(y_gpu, y_cpu, f32_atol(37), 1e-5, "linear output");
  expect_near(gx, cx, f32_atol(23), 1e-5, "linear grad input");
  expect_near(gw, cw, f32_atol(36), 1e-5, "linear grad weight");
  expect_near(gb, cb, f32_atol(36), 1e-5, "linear grad bias");
}

}  // namespace
}  // namespace tapegrad
