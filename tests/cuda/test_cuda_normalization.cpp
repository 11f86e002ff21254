// CPU/CUDA parity of layer_norm and rms_norm through the public ops, forward and backward (input
// and parameter gradients): row widths on both sides of the warp-per-row limit, enough rows for
// several parameter-gradient slices, with and without parameters, several normalised dims, strided
// inputs, 16-bit inputs (computed in float), rows far from zero (layer_norm), the default eps and
// a weight of another dtype (rms_norm), and empty inputs. Inputs are made on the CPU and copied,
// so both devices see the same numbers. The cases skip where no GPU is present.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/random_values.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::gpu_size;

using testing::uniform;

Tensor gpu(const Tensor& t) {
  return t.defined() ? t.to(kCUDA) : Tensor();
}

struct Grads {
  Tensor y, dx, dw, db;
};

// layer_norm of copies of x, w, b (leaves on `device`, w and b may be undefined), then backward
// with dy; `dtype` is what the op sees.
Grads run(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, const Shape& normalized, Device device,
          DType dtype, double eps = 1e-5) {
  // detach(): a fresh leaf each run, also where to() has nothing to convert and returns t itself.
  auto leaf = [&](const Tensor& t) {
    return t.defined() ? t.detach().to(dtype).to(device).requires_grad_(true) : Tensor();
  };
  Tensor xl = leaf(x), wl = leaf(w), bl = leaf(b);
  Grads g;
  g.y = layer_norm(xl, normalized, wl, bl, eps);
  g.y.backward(dy.to(dtype).to(device));
  g.dx = xl.grad();
  g.dw = wl.defined() ? wl.grad() : Tensor();
  g.db = bl.defined() ? bl.grad() : Tensor();
  return g;
}

struct Tols {
  testing::Tol y, dx, params;
};

Tols tols_for(DType dtype) {
  // f32: rows are summed in different orders on the two devices (lanes vs tree).
  if (dtype == kFloat64) return {{1e-12, 1e-13}, {1e-11, 1e-12}, {1e-11, 1e-11}};
  return {{1e-5, 1e-5}, {1e-4, 1e-4}, {1e-4, 1e-4}};
}

void expect_grads_parity(const Grads& on_cuda, const Grads& on_cpu, const Tols& tol, const std::string& what) {
  testing::expect_parity(on_cuda.y, on_cpu.y, tol.y, what + " forward");
  testing::expect_parity(on_cuda.dx, on_cpu.dx, tol.dx, what + " grad input");
  if (on_cpu.dw.defined()) testing::expect_parity(on_cuda.dw, on_cpu.dw, tol.params, what + " grad weight");
  if (on_cpu.db.defined()) testing::expect_parity(on_cuda.db, on_cpu.db, tol.params, what + " grad bias");
}

struct Affine {
  bool weight, bias;
  const char* name;
};
constexpr Affine kAffines[] = {
    {true, true, "weight+bias"}, {true, false, "weight"}, {false, true, "bias"}, {false, false, "none"}};

TEST(CudaLayerNormParity, ForwardAndBackwardOverWidths) {
  SKIP_WITHOUT_GPU();
  // Widths around a warp (32) and the warp-per-row limit (1024); rows from one to several
  // parameter-gradient slices (128 rows or more each).
  const std::vector<int64_t> widths = {1, 7, 32, 33, 1000, 1024, 1025, gpu_size(5000, 1500)};
  const std::vector<int64_t> row_counts = {1, 37, gpu_size(3000, 300)};
  uint64_t seed = 1;
  for (DType dtype : {kFloat32, kFloat64}) {
    int variant = 0;
    for (int64_t cols : widths) {
      for (int64_t rows : row_counts) {
        if (testing::cuda_is_emulated() && rows * cols > 400000) continue;
        const Affine& a = kAffines[variant++ % 4];
        const std::string what = shape_str({rows, cols}) + " " + a.name + " " + dtype_name(dtype);
        Tensor x = uniform({rows, cols}, kFloat64, seed++, -2.0, 3.0);
        Tensor w = a.weight ? uniform({cols}, kFloat64, seed++, 0.5, 1.5) : Tensor();
        Tensor b = a.bias ? uniform({cols}, kFloat64, seed++) : Tensor();
        Tensor dy = uniform({rows, cols}, kFloat64, seed++);
        expect_grads_parity(run(x, w, b, dy, {cols}, kCUDA, dtype), run(x, w, b, dy, {cols}, kCPU, dtype),
                            tols_for(dtype), what);
      }
    }
  }
}

// Every affine combination on one shape that takes the parameter-gradient slices.
TEST(CudaLayerNormParity, EveryAffineCombination) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = gpu_size(2000, 300), cols = 40;
  uint64_t seed = 100;
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Affine& a : kAffines) {
      Tensor x = uniform({rows, cols}, kFloat64, seed++);
      Tensor w = a.weight ? uniform({cols}, kFloat64, seed++) : Tensor();
      Tensor b = a.bias ? uniform({cols}, kFloat64, seed++) : Tensor();
      Tensor dy = uniform({rows, cols}, kFloat64, seed++);
      expect_grads_parity(run(x, w, b, dy, {cols}, kCUDA, dtype), run(x, w, b, dy, {cols}, kCPU, dtype),
                          tols_for(dtype), std::string(a.name) + " " + dtype_name(dtype));
    }
  }
}

TEST(CudaLayerNormParity, SeveralDimsStridedInputsAndEps) {
  SKIP_WITHOUT_GPU();
  // [3, 4, 5, 6] over [5, 6].
  Tensor x = uniform({3, 4, 5, 6}, kFloat64, 200);
  Tensor w = uniform({5, 6}, kFloat64, 201), b = uniform({5, 6}, kFloat64, 202);
  Tensor dy = uniform({3, 4, 5, 6}, kFloat64, 203);
  expect_grads_parity(run(x, w, b, dy, {5, 6}, kCUDA, kFloat64, 1e-3), run(x, w, b, dy, {5, 6}, kCPU, kFloat64, 1e-3),
                      tols_for(kFloat64), "[3, 4, 5, 6] over [5, 6]");
  // A transposed input and a strided incoming gradient.
  Tensor base = uniform({40, 30}, kFloat32, 204);
  Tensor xc = base.clone().requires_grad_(true), xg = gpu(base).requires_grad_(true);
  Tensor g = uniform({30, 80}, kFloat32, 205).slice(1, 0, 80, 2);  // [30, 40], strides (80, 2)
  Tensor yc = layer_norm(xc.t(), {40}), yg = layer_norm(xg.t(), {40});
  testing::expect_parity(yg, yc, tols_for(kFloat32).y, "transposed forward");
  yc.backward(g);
  yg.backward(gpu(g));
  testing::expect_parity(xg.grad(), xc.grad(), tols_for(kFloat32).dx, "transposed backward");
}

// float16 and bfloat16 compute in float: against the CPU in float32 on the same (rounded) values.
TEST(CudaLayerNormParity, HalfInputsComputeInFloat) {
  SKIP_WITHOUT_GPU();
  for (DType half : {kFloat16, kBFloat16}) {
    for (int64_t cols : {64, 1500}) {
      const int64_t rows = 300;
      auto rounded = [&](const Tensor& t) { return t.to(half).to(kFloat64); };
      Tensor x = rounded(uniform({rows, cols}, kFloat64, 300, -2.0, 2.0));
      Tensor w = rounded(uniform({cols}, kFloat64, 301, 0.5, 1.5)), b = rounded(uniform({cols}, kFloat64, 302));
      Tensor dy = rounded(uniform({rows, cols}, kFloat64, 303));
      Grads on_cuda = run(x, w, b, dy, {cols}, kCUDA, half);
      Grads on_cpu = run(x, w, b, dy, {cols}, kCPU, kFloat32);
      const std::string what = shape_str({rows, cols}) + " " + dtype_name(half);
      ASSERT_EQ(on_cuda.y.dtype(), half) << what;
      // One rounding of each result to 16 bits (bfloat16 keeps 8 bits of mantissa); the
      // parameter gradients are sums of 300 rows.
      const double r = half == kFloat16 ? 2e-3 : 1e-2;
      testing::expect_allclose(on_cuda.y.to(kFloat32), on_cpu.y, {r, r}, what + " forward");
      testing::expect_allclose(on_cuda.dx.to(kFloat32), on_cpu.dx, {r, 10 * r}, what + " grad input");
      testing::expect_allclose(on_cuda.dw.to(kFloat32), on_cpu.dw, {r, 10 * r}, what + " grad weight");
      testing::expect_allclose(on_cuda.db.to(kFloat32), on_cpu.db, {r, 10 * r}, what + " grad bias");
    }
  }
}

TEST(CudaLayerNormParity, RowsFarFromZero) {
  SKIP_WITHOUT_GPU();
  Tensor x = add(uniform({50, 700}, kFloat64, 400), 1e4);
  Tensor dy = uniform({50, 700}, kFloat64, 401);
  // Both devices shift the mean by the row's first value; what differs is the summation order.
  expect_grads_parity(run(x, Tensor(), Tensor(), dy, {700}, kCUDA, kFloat32),
                      run(x, Tensor(), Tensor(), dy, {700}, kCPU, kFloat32), {{1e-4, 1e-3}, {1e-3, 1e-3}, {1e-3, 1e-3}},
                      "offset 1e4");
}

TEST(CudaLayerNormParity, EmptyInputsAndRepeatability) {
  SKIP_WITHOUT_GPU();
  Tensor x = zeros({0, 8}, kFloat32);
  Tensor w = ones({8}, kFloat32), b = zeros({8}, kFloat32);
  Tensor dy = zeros({0, 8}, kFloat32);
  expect_grads_parity(run(x, w, b, dy, {8}, kCUDA, kFloat32), run(x, w, b, dy, {8}, kCPU, kFloat32), tols_for(kFloat32),
                      "no rows");
  // The parameter gradients add fixed slices in a fixed order: two runs give the same bits.
  Tensor big = uniform({gpu_size(4000, 300), 96}, kFloat32, 500), g = uniform({gpu_size(4000, 300), 96}, kFloat32, 501);
  Tensor wb = uniform({96}, kFloat32, 502), bb = uniform({96}, kFloat32, 503);
  Grads first = run(big, wb, bb, g, {96}, kCUDA, kFloat32), second = run(big, wb, bb, g, {96}, kCUDA, kFloat32);
  testing::expect_allclose(second.dw, first.dw, testing::kExact, "grad weight twice");
  testing::expect_allclose(second.db, first.db, testing::kExact, "grad bias twice");
}

TEST(CudaLayerNormParity, MixedDevicesAreAnError) {
  SKIP_WITHOUT_GPU();
  testing::expect_error(
      [] {
        layer_norm(zeros({2, 4}).to(kCUDA), {4}, ones({4}));
      },
      {"layer_norm", "same device", "cpu"});
}

// ---------------------------------------------------------------------------------------------
// rms_norm
// ---------------------------------------------------------------------------------------------

// rms_norm of copies of x and w (leaves on `device`, w may be undefined), then backward with dy;
// `dtype` is what the op sees. db stays undefined.
Grads run_rms(const Tensor& x, const Tensor& w, const Tensor& dy, const Shape& normalized, Device device, DType dtype,
              std::optional<double> eps = 1e-5) {
  auto leaf = [&](const Tensor& t) {
    return t.defined() ? t.detach().to(dtype).to(device).requires_grad_(true) : Tensor();
  };
  Tensor xl = leaf(x), wl = leaf(w);
  Grads g;
  g.y = rms_norm(xl, normalized, wl, eps);
  g.y.backward(dy.to(dtype).to(device));
  g.dx = xl.grad();
  g.dw = wl.defined() ? wl.grad() : Tensor();
  return g;
}

TEST(CudaRmsNormParity, ForwardAndBackwardOverWidths) {
  SKIP_WITHOUT_GPU();
  // Widths around a warp (32) and the warp-per-row limit (1024); rows from one to several
  // weight-gradient slices (128 rows or more each).
  const std::vector<int64_t> widths = {1, 7, 32, 33, 1000, 1024, 1025, gpu_size(5000, 1500)};
  const std::vector<int64_t> row_counts = {1, 37, gpu_size(3000, 300)};
  uint64_t seed = 600;
  for (DType dtype : {kFloat32, kFloat64}) {
    int variant = 0;
    for (int64_t cols : widths) {
      for (int64_t rows : row_counts) {
        if (testing::cuda_is_emulated() && rows * cols > 400000) continue;
        const bool with_weight = variant++ % 2 == 0;
        const std::string what =
            shape_str({rows, cols}) + (with_weight ? " weight " : " no weight ") + dtype_name(dtype);
        Tensor x = uniform({rows, cols}, kFloat64, seed++, -2.0, 3.0);
        Tensor w = with_weight ? uniform({cols}, kFloat64, seed++, 0.5, 1.5) : Tensor();
        Tensor dy = uniform({rows, cols}, kFloat64, seed++);
        expect_grads_parity(run_rms(x, w, dy, {cols}, kCUDA, dtype), run_rms(x, w, dy, {cols}, kCPU, dtype),
                            tols_for(dtype), what);
      }
    }
  }
}

TEST(CudaRmsNormParity, SeveralDimsStridedInputsAndDefaultEps) {
  SKIP_WITHOUT_GPU();
  // [3, 4, 5, 6] over [5, 6], the default eps (float64's).
  Tensor x = uniform({3, 4, 5, 6}, kFloat64, 700), w = uniform({5, 6}, kFloat64, 701);
  Tensor dy = uniform({3, 4, 5, 6}, kFloat64, 702);
  expect_grads_parity(run_rms(x, w, dy, {5, 6}, kCUDA, kFloat64, std::nullopt),
                      run_rms(x, w, dy, {5, 6}, kCPU, kFloat64, std::nullopt), tols_for(kFloat64),
                      "[3, 4, 5, 6] over [5, 6]");
  // Rows whose mean square is of the order of float32's eps: the default must be the same on both.
  Tensor tiny = mul(uniform({40, 64}, kFloat64, 703, 0.5, 1.5), 1e-4), g = uniform({40, 64}, kFloat64, 704);
  expect_grads_parity(run_rms(tiny, Tensor(), g, {64}, kCUDA, kFloat32, std::nullopt),
                      run_rms(tiny, Tensor(), g, {64}, kCPU, kFloat32, std::nullopt), tols_for(kFloat32),
                      "default eps, float32");
  // A transposed input and a strided incoming gradient.
  Tensor base = uniform({40, 30}, kFloat32, 705);
  Tensor xc = base.clone().requires_grad_(true), xg = gpu(base).requires_grad_(true);
  Tensor grad = uniform({30, 80}, kFloat32, 706).slice(1, 0, 80, 2);  // [30, 40], strides (80, 2)
  Tensor yc = rms_norm(xc.t(), {40}), yg = rms_norm(xg.t(), {40});
  testing::expect_parity(yg, yc, tols_for(kFloat32).y, "transposed forward");
  yc.backward(grad);
  yg.backward(gpu(grad));
  testing::expect_parity(xg.grad(), xc.grad(), tols_for(kFloat32).dx, "transposed backward");
}

// float16 and bfloat16 compute in float on both devices (the CPU through float32 copies): the two
// 16-bit results differ by the summation order before one rounding.
TEST(CudaRmsNormParity, HalfInputsComputeInFloat) {
  SKIP_WITHOUT_GPU();
  for (DType half : {kFloat16, kBFloat16}) {
    for (int64_t cols : {64, 1500}) {
      const int64_t rows = 300;
      Tensor x = uniform({rows, cols}, kFloat64, 800, -2.0, 2.0), w = uniform({cols}, kFloat64, 801, 0.5, 1.5);
      Tensor dy = uniform({rows, cols}, kFloat64, 802);
      const std::string what = shape_str({rows, cols}) + " " + dtype_name(half);
      for (std::optional<double> eps : {std::optional<double>(1e-5), std::optional<double>()}) {
        Grads on_cuda = run_rms(x, w, dy, {cols}, kCUDA, half, eps);
        Grads on_cpu = run_rms(x, w, dy, {cols}, kCPU, half, eps);
        // One rounding of each result to 16 bits (bfloat16 keeps 8 bits of mantissa); the weight
        // gradient is a sum of 300 rows.
        const double r = half == kFloat16 ? 2e-3 : 1e-2;
        testing::expect_parity(on_cuda.y, on_cpu.y, {r, r}, what + " forward");
        testing::expect_parity(on_cuda.dx, on_cpu.dx, {r, 10 * r}, what + " grad input");
        testing::expect_parity(on_cuda.dw, on_cpu.dw, {r, 10 * r}, what + " grad weight");
      }
    }
  }
}

// nn::RMSNorm's float32 weight on a bfloat16 input: promoted, as on the CPU.
TEST(CudaRmsNormParity, WeightOfAnotherDtype) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform({64, 96}, kFloat64, 850).to(kBFloat16), w = uniform({96}, kFloat32, 851, 0.5, 1.5);
  Tensor xc = x.clone().requires_grad_(true), wc = w.clone().requires_grad_(true);
  Tensor xg = gpu(x).requires_grad_(true), wg = gpu(w).requires_grad_(true);
  Tensor yc = rms_norm(xc, {96}, wc), yg = rms_norm(xg, {96}, wg);
  ASSERT_EQ(yg.dtype(), kBFloat16);
  testing::expect_parity(yg, yc, {1e-2, 1e-2}, "bf16 input, f32 weight forward");
  sum(yc.to(kFloat32)).backward();
  sum(yg.to(kFloat32)).backward();
  testing::expect_parity(xg.grad(), xc.grad(), {1e-2, 1e-2}, "grad input");
  testing::expect_parity(wg.grad(), wc.grad(), {1e-4, 1e-4}, "grad weight (float32)");
}

TEST(CudaRmsNormParity, EmptyInputsAndRepeatability) {
  SKIP_WITHOUT_GPU();
  Tensor x = zeros({0, 8}, kFloat32), w = ones({8}, kFloat32), dy = zeros({0, 8}, kFloat32);
  expect_grads_parity(run_rms(x, w, dy, {8}, kCUDA, kFloat32), run_rms(x, w, dy, {8}, kCPU, kFloat32),
                      tols_for(kFloat32), "no rows");
  // The weight gradient adds fixed slices in a fixed order: two runs give the same bits.
  Tensor big = uniform({gpu_size(4000, 300), 96}, kFloat32, 900), g = uniform({gpu_size(4000, 300), 96}, kFloat32, 901);
  Tensor wb = uniform({96}, kFloat32, 902);
  Grads first = run_rms(big, wb, g, {96}, kCUDA, kFloat32), second = run_rms(big, wb, g, {96}, kCUDA, kFloat32);
  testing::expect_allclose(second.dw, first.dw, testing::kExact, "grad weight twice");
  testing::expect_allclose(second.dx, first.dx, testing::kExact, "grad input twice");
}

TEST(CudaRmsNormParity, MixedDevicesAreAnError) {
  SKIP_WITHOUT_GPU();
  testing::expect_error([] { rms_norm(zeros({2, 4}).to(kCUDA), {4}, ones({4})); }, {"rms_norm", "same device", "cpu"});
}

}  // namespace
}  // namespace tapegrad
