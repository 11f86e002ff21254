// layer_norm and nn::LayerNorm on the CPU: values and gradients against PyTorch's formulas computed
// here in double, f64 gradchecks for input, weight and bias, thread-count independence of the
// parameter gradients, bad inputs, and the module (parameters, printing, state dict).
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "support/parity.h"
#include "support/random_values.h"
#include "support/test_util.h"
#include "support/thread_count.h"

namespace tapegrad {
namespace {

using testing::expect_allclose;
using testing::expect_error;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using testing::uniform;

// PyTorch's layer_norm, forward and backward, in double over rows of `cols` values:
//   y = (x - mean) / sqrt(var + eps) * w + b, var biased (unbiased = true is the planted bug of
//   the negative control);
//   dx = rstd / N * (N dxhat - sum(dxhat) - xhat sum(dxhat xhat)), dxhat = dy w;
//   dw = sum over rows of dy xhat; db = sum over rows of dy.
struct Reference {
  std::vector<double> y, dx, dw, db;
};

Reference reference(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& dy, int64_t cols, double eps, bool unbiased = false) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  Reference r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(cols, 0.0);
  r.db.assign(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* row = x.data() + i * cols;
    double mean = 0;
    for (int64_t c = 0; c < cols; ++c) mean += row[c];
    mean /= cols;
    double var = 0;
    for (int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
    var /= unbiased ? cols - 1 : cols;
    const double rstd = 1.0 / std::sqrt(var + eps);
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (row[c] - mean) * rstd;
      const double wc = w.empty() ? 1.0 : w[c], bc = b.empty() ? 0.0 : b[c];
      r.y[i * cols + c] = xhat * wc + bc;
      const double g = dy[i * cols + c];
      sum_dxhat += g * wc;
      sum_dxhat_xhat += g * wc * xhat;
      r.dw[c] += g * xhat;
      r.db[c] += g;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (row[c] - mean) * rstd;
      const double dxhat = dy[i * cols + c] * (w.empty() ? 1.0 : w[c]);
      r.dx[i * cols + c] = rstd / cols * (cols * dxhat - sum_dxhat - xhat * sum_dxhat_xhat);
    }
  }
  return r;
}

Tensor from(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return tensor<double>(v, shape).to(dtype);
}

struct Affine {
  bool weight, bias;
  const char* name;
};
constexpr Affine kAffines[] = {
    {true, true, "weight+bias"}, {true, false, "weight"}, {false, true, "bias"}, {false, false, "none"}};

// Forward values and all three gradients against the reference, for shapes that cover one row,
// rows shorter and longer than the 16 vector lanes, several normalised dims, and enough rows
// (4096 x 33, 3 x 5000) for the OpenMP paths and several parameter-gradient blocks.
TEST(LayerNorm, ValuesAndGradientsMatchPyTorchFormula) {
  struct Case {
    Shape input, normalized;
  };
  const std::vector<Case> cases = {{{6}, {6}},         {{5, 1}, {1}},       {{4, 15}, {15}},
                                   {{3, 16}, {16}},    {{7, 17}, {17}},     {{2, 3, 4, 5}, {4, 5}},
                                   {{4096, 33}, {33}}, {{3, 5000}, {5000}}, {{2, 3, 4}, {2, 3, 4}}};
  uint64_t seed = 1;
  for (DType dtype : {kFloat32, kFloat64}) {
    const double tol = dtype == kFloat32 ? 2e-5 : 1e-12;
    for (const Case& c : cases) {
      for (const Affine& a : kAffines) {
        const int64_t cols = shape_numel(c.normalized);
        const std::string what =
            shape_str(c.input) + " over " + shape_str(c.normalized) + " " + a.name + " " + dtype_name(dtype);
        // Rows far from zero (offset 3) with a spread of 2: the mean matters.
        Tensor x = uniform(c.input, kFloat64, seed++, 2.0, 4.0);
        Tensor w = a.weight ? uniform(c.normalized, kFloat64, seed++, 0.5, 1.5) : Tensor();
        Tensor b = a.bias ? uniform(c.normalized, kFloat64, seed++) : Tensor();
        Tensor dy = uniform(c.input, kFloat64, seed++);
        const Reference r = reference(values(x), w.defined() ? values(w) : std::vector<double>{},
                                      b.defined() ? values(b) : std::vector<double>{}, values(dy), cols, 1e-5);
        Tensor xt = x.to(dtype).requires_grad_(true);
        Tensor wt = w.defined() ? w.to(dtype).requires_grad_(true) : Tensor();
        Tensor bt = b.defined() ? b.to(dtype).requires_grad_(true) : Tensor();
        Tensor y = layer_norm(xt, c.normalized, wt, bt);
        ASSERT_EQ(y.sizes(), c.input) << what;
        ASSERT_EQ(y.dtype(), dtype) << what;
        expect_allclose(y, from(r.y, c.input, dtype), {tol, tol}, what + " forward");
        y.backward(dy.to(dtype));
        expect_allclose(xt.grad(), from(r.dx, c.input, dtype), {10 * tol, 10 * tol}, what + " grad input");
        // Parameter gradients sum over up to 4096 rows.
        if (wt.defined())
          expect_allclose(wt.grad(), from(r.dw, c.normalized, dtype), {10 * tol, 100 * tol}, what + " grad weight");
        if (bt.defined())
          expect_allclose(bt.grad(), from(r.db, c.normalized, dtype), {10 * tol, 100 * tol}, what + " grad bias");
      }
    }
  }
}

// Negative control for the test above: the reference tells the biased variance (PyTorch's) from
// the unbiased one, so a kernel dividing by N - 1 would fail it.
TEST(LayerNorm, ReferenceTellsBiasedFromUnbiasedVariance) {
  Tensor x = uniform({4, 15}, kFloat64, 3);
  Tensor y = layer_norm(x, {15});
  const std::vector<double> dy(60, 1.0);
  const Reference unbiased = reference(values(x), {}, {}, dy, 15, 1e-5, /*unbiased=*/true);
  const std::vector<double> got = values(y);
  double largest = 0;
  for (size_t i = 0; i < got.size(); ++i) largest = std::max(largest, std::fabs(got[i] - unbiased.y[i]));
  EXPECT_GT(largest, 1e-3);
}

TEST(LayerNorm, HandComputedValues) {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25.
  Tensor x = tensor<double>({1, 2, 3, 4}, {1, 4});
  const double s = 1.0 / std::sqrt(1.25 + 1e-5);
  testing::expect_close(layer_norm(x, {4}), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s}, 1e-15);
  Tensor w = tensor<double>({1, 2, 3, 4}, {4}), b = tensor<double>({0, 1, 0, -1}, {4});
  testing::expect_close(
      layer_norm(x, {4}, w, b, 0.25),
      {-1.5 / std::sqrt(1.5), -1.0 / std::sqrt(1.5) + 1, 1.5 / std::sqrt(1.5), 6.0 / std::sqrt(1.5) - 1}, 1e-14);
  // A constant row normalises to 0 (rstd = 1 / sqrt(eps)): the output is the bias.
  Tensor flat = full({2, 3}, 7.0, kFloat32);
  testing::expect_close(layer_norm(flat, {3}, Tensor(), tensor<float>({1, 2, 3}, {3})), {1, 2, 3, 1, 2, 3}, 0);
}

// Large offsets keep their precision: the variance is a second pass over x - mean, not
// E[x^2] - mean^2, which would cancel to noise in float32 here (E[x^2] ~ 1e8 has an ulp of 8, the
// variance is 1/3). What is left is the mean itself being a float32 near 1e4 (half an ulp is
// 4.9e-4, times rstd ~ 1.7), as in PyTorch.
TEST(LayerNorm, LargeOffsetKeepsPrecisionInFloat32) {
  Tensor small = uniform({8, 300}, kFloat64, 5);
  Tensor x = add(small, 1e4);
  Tensor y32 = layer_norm(x.to(kFloat32), {300});
  // The reference sees the float32-rounded input.
  Tensor y64 = layer_norm(x.to(kFloat32).to(kFloat64), {300});
  expect_allclose(y32, y64.to(kFloat32), {0, 1e-3}, "offset 1e4");
}

TEST(LayerNorm, NonContiguousInputAndParameters) {
  Tensor base = uniform({6, 5}, kFloat64, 7);
  Tensor x = base.t();  // [5, 6], strides (1, 5)
  Tensor wide = uniform({2, 6}, kFloat64, 8);
  Tensor w = wide.select(0, 1), b = uniform({12}, kFloat64, 9).slice(0, 0, 12, 2);
  expect_allclose(layer_norm(x, {6}, w, b), layer_norm(x.contiguous(), {6}, w.contiguous(), b.contiguous()),
                  testing::kExact, "transposed input, strided parameters");
}

TEST(LayerNorm, NaNStaysInItsRow) {
  Tensor x = tensor<double>({1, kNaN, 3, 1, 2, 3}, {2, 3});
  std::vector<double> y = values(layer_norm(x, {3}));
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(y[c])) << c;
  for (int c = 3; c < 6; ++c) EXPECT_FALSE(std::isnan(y[c])) << c;
}

// The weight and bias gradients sum rows in blocks fixed by the shape (Note [layer_norm parameter
// gradients]): one thread and two give the same bits.
TEST(LayerNorm, ParameterGradientsDoNotDependOnThreadCount) {
  testing::ThreadCount thread_count;
  Tensor x = uniform({4096, 64}, kFloat32, 11), dy = uniform({4096, 64}, kFloat32, 12);
  std::vector<Tensor> grads;
  for (int threads : {1, 2}) {
    thread_count.set(threads);
    Tensor w = ones({64}).requires_grad_(true), b = zeros({64}).requires_grad_(true);
    Tensor xt = x.clone().requires_grad_(true);
    layer_norm(xt, {64}, w, b).backward(dy);
    grads.push_back(w.grad());
    grads.push_back(b.grad());
    grads.push_back(xt.grad());
  }
  expect_allclose(grads[3], grads[0], testing::kExact, "grad weight");
  expect_allclose(grads[4], grads[1], testing::kExact, "grad bias");
  expect_allclose(grads[5], grads[2], testing::kExact, "grad input");
}

TEST(LayerNorm, EmptyInputs) {
  // No rows: an empty output, and parameter gradients that are zero sums.
  Tensor x = zeros({0, 4}, kFloat64).requires_grad_(true);
  Tensor w = ones({4}, kFloat64).requires_grad_(true), b = zeros({4}, kFloat64).requires_grad_(true);
  Tensor y = layer_norm(x, {4}, w, b);
  EXPECT_EQ(y.sizes(), (Shape{0, 4}));
  sum(y).backward();
  EXPECT_EQ(x.grad().sizes(), (Shape{0, 4}));
  testing::expect_close(w.grad(), {0, 0, 0, 0}, 0);
  testing::expect_close(b.grad(), {0, 0, 0, 0}, 0);
  // Empty rows: an empty output.
  EXPECT_EQ(layer_norm(zeros({3, 0}), {0}).sizes(), (Shape{3, 0}));
}

TEST(LayerNorm, OnlyTheGradientsAskedForAreComputed) {
  Tensor x = uniform({3, 4}, kFloat64, 13);
  Tensor w = uniform({4}, kFloat64, 14).requires_grad_(true), b = uniform({4}, kFloat64, 15);
  sum(layer_norm(x, {4}, w, b)).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // Without any input requiring grad, no node is recorded.
  EXPECT_FALSE(layer_norm(x, {4}, b, b).requires_grad());
}

TEST(LayerNorm, InPlaceChangeOfSavedInputIsCaught) {
  Tensor x = uniform({3, 4}, kFloat64, 16).requires_grad_(true);
  Tensor h = mul(x, 2.0);
  Tensor y = layer_norm(h, {4});
  {
    NoGradGuard no_grad;
    h.add_(1.0);
  }
  EXPECT_THROW(sum(y).backward(), Error);
}

// ---------------------------------------------------------------------------------------------
// gradcheck in f64
// ---------------------------------------------------------------------------------------------

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                      const std::string& what) {
  autograd::GradcheckResult result = autograd::gradcheck(fn, inputs);
  EXPECT_TRUE(result.ok) << what << ": " << result.report << " max abs error " << result.max_abs_error;
}

TEST(LayerNormGradcheck, InputWeightBias) {
  using testing::leaf;
  expect_gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], {5}, v[1], v[2]); },
                   {leaf({3, 5}, 1), leaf({5}, 2), leaf({5}, 3)}, "[3, 5] over [5]");
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return layer_norm(v[0], {3, 4}, v[1], v[2], 1e-3);
      },
      {leaf({2, 3, 4}, 4), leaf({3, 4}, 5), leaf({3, 4}, 6)}, "[2, 3, 4] over [3, 4], eps 1e-3");
  expect_gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], {7}); }, {leaf({4, 7}, 7)}, "no affine");
  expect_gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], {6}, v[1]); },
                   {leaf({2, 6}, 8), leaf({6}, 9)}, "weight only");
  expect_gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], {6}, Tensor(), v[1]); },
                   {leaf({2, 6}, 10), leaf({6}, 11)}, "bias only");
  expect_gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0].t(), {4}, v[1], v[2]); },
                   {leaf({4, 5}, 12), leaf({4}, 13), leaf({4}, 14)}, "transposed input");
  expect_gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], {1}, v[1], v[2]); },
                   {leaf({3, 1}, 15), leaf({1}, 16), leaf({1}, 17)}, "rows of one");
  // Many rows (several parameter-gradient blocks, OpenMP) through a broadcast.
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        Tensor ramp = linspace(0.5, 2.0, 600, kFloat64).unsqueeze(1);
        return sum(layer_norm(v[0].expand({600, 40}) * ramp + v[0], {40}, v[1], v[2]), {0});
      },
      {leaf({1, 40}, 18), leaf({40}, 19), leaf({40}, 20)}, "600 rows");
}

// ---------------------------------------------------------------------------------------------
// bad inputs
// ---------------------------------------------------------------------------------------------

TEST(LayerNormErrors, NameTheOpAndTheCulprit) {
  Tensor x = zeros({2, 5});
  expect_error([&] { layer_norm(x, {4}); }, {"layer_norm", "normalized_shape=[4]", "[*, 4]", "[2, 5]"});
  expect_error([&] { layer_norm(x, {2, 4}); }, {"layer_norm", "[2, 4]", "[*, 2, 4]", "[2, 5]"});
  expect_error([&] { layer_norm(x, {3, 2, 5}); }, {"layer_norm", "[3, 2, 5]", "[2, 5]"});
  expect_error([&] { layer_norm(x, {}); }, {"layer_norm", "normalized_shape", "[]"});
  expect_error([&] { layer_norm(x, {5}, zeros({4})); }, {"layer_norm", "weight", "[4]", "[5]"});
  expect_error([&] { layer_norm(x, {5}, zeros({1, 5})); }, {"layer_norm", "weight", "[1, 5]", "[5]"});
  expect_error([&] { layer_norm(x, {5}, Tensor(), zeros({6})); }, {"layer_norm", "bias", "[6]", "[5]"});
  expect_error([&] { layer_norm(x, {5}, zeros({5}, kFloat64)); }, {"layer_norm", "weight", "float64", "float32"});
  expect_error([&] { layer_norm(x, {5}, Tensor(), zeros({5}, kFloat64)); }, {"layer_norm", "bias", "float64"});
  expect_error([&] { layer_norm(x, {5}, Tensor(), Tensor(), 0.0); }, {"layer_norm", "eps", "0"});
  expect_error([&] { layer_norm(x, {5}, Tensor(), Tensor(), -1e-5); }, {"layer_norm", "eps", "-1e-05"});
  expect_error([&] { layer_norm(x, {5}, Tensor(), Tensor(), kNaN); }, {"layer_norm", "eps", "nan"});
  expect_error([&] { layer_norm(x, {5}, Tensor(), Tensor(), std::numeric_limits<double>::infinity()); },
               {"layer_norm", "eps", "inf"});
  expect_error([&] { layer_norm(zeros({2, 5}, kInt64), {5}); }, {"layer_norm", "int64"});
  expect_error([&] { layer_norm(Tensor(), {5}); }, {"layer_norm", "undefined"});
  // Negative control: a matching call passes every one of those checks.
  EXPECT_NO_THROW(layer_norm(x, {5}, zeros({5}), zeros({5}), 1e-5));
}

// ---------------------------------------------------------------------------------------------
// nn::LayerNorm
// ---------------------------------------------------------------------------------------------

TEST(LayerNormModule, ParametersStartAtOnesAndZeros) {
  nn::LayerNorm ln(16);
  EXPECT_EQ(ln.normalized_shape(), (Shape{16}));
  EXPECT_EQ(ln.eps(), 1e-5);
  EXPECT_TRUE(ln.elementwise_affine());
  StateDict state = ln.state_dict();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "weight");
  EXPECT_EQ(state[1].first, "bias");
  testing::expect_close(ln.weight, std::vector<double>(16, 1.0), 0);
  testing::expect_close(ln.bias, std::vector<double>(16, 0.0), 0);
  EXPECT_TRUE(ln.weight.requires_grad());
  EXPECT_EQ(ln.weight.dtype(), kFloat32);

  nn::LayerNorm no_bias({4, 8}, 1e-6, true, /*bias=*/false);
  ASSERT_EQ(no_bias.named_parameters().size(), 1u);
  EXPECT_EQ(no_bias.named_parameters()[0].first, "weight");
  EXPECT_EQ(no_bias.weight.sizes(), (Shape{4, 8}));
  EXPECT_FALSE(no_bias.bias.defined());

  nn::LayerNorm plain(8, 1e-5, /*elementwise_affine=*/false);
  EXPECT_TRUE(plain.parameters().empty());
}

TEST(LayerNormModule, PrintsLikePyTorch) {
  EXPECT_EQ(nn::LayerNorm(16).str(), "LayerNorm((16,), eps=1e-05, elementwise_affine=true)");
  EXPECT_EQ(nn::LayerNorm({4, 8}, 1e-6, false).str(), "LayerNorm((4, 8), eps=1e-06, elementwise_affine=false)");
  EXPECT_EQ(nn::LayerNorm(3, 0.001).str(), "LayerNorm((3,), eps=0.001, elementwise_affine=true)");
}

TEST(LayerNormModule, ForwardIsTheFunctionalOpAndTrains) {
  nn::Sequential model(nn::Linear(6, 8), nn::LayerNorm(8), nn::ReLU(), nn::Linear(8, 2));
  EXPECT_EQ(model.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=6, out_features=8, bias=true)\n"
            "  (1): LayerNorm((8,), eps=1e-05, elementwise_affine=true)\n"
            "  (2): ReLU()\n"
            "  (3): Linear(in_features=8, out_features=2, bias=true)\n"
            ")");
  auto ln = std::dynamic_pointer_cast<nn::LayerNorm>(model[1]);
  ASSERT_NE(ln, nullptr);
  {
    NoGradGuard no_grad;
    ln->weight.copy_(uniform({8}, kFloat32, 21));
    ln->bias.copy_(uniform({8}, kFloat32, 22));
  }
  Tensor x = uniform({5, 8}, kFloat32, 23);
  expect_allclose(ln->forward(x), layer_norm(x, {8}, ln->weight, ln->bias), testing::kExact, "module = op");
  Tensor out = model.forward(uniform({5, 6}, kFloat32, 24));
  sum(out).backward();
  EXPECT_TRUE(ln->weight.grad().defined());
  EXPECT_TRUE(ln->bias.grad().defined());
  // Moving the module moves its parameters, and forward follows.
  model.to(kFloat64);
  EXPECT_EQ(model.forward(uniform({2, 6}, kFloat64, 25)).dtype(), kFloat64);
}

TEST(LayerNormModule, StateDictRoundTrip) {
  nn::LayerNorm a({2, 3}), b({2, 3});
  {
    NoGradGuard no_grad;
    a.weight.copy_(uniform({2, 3}, kFloat32, 26));
    a.bias.copy_(uniform({2, 3}, kFloat32, 27));
  }
  b.load_state_dict(a.state_dict());
  expect_allclose(b.weight, a.weight, testing::kExact, "weight");
  expect_allclose(b.bias, a.bias, testing::kExact, "bias");
  nn::LayerNorm no_bias({2, 3}, 1e-5, true, false);
  expect_error([&] { no_bias.load_state_dict(a.state_dict()); }, {"Unexpected key", "bias"});
}

TEST(LayerNormModule, BadSettingsThrow) {
  expect_error([] { nn::LayerNorm(Shape{}); }, {"LayerNorm", "normalized_shape", "[]"});
  expect_error([] { nn::LayerNorm(0); }, {"LayerNorm", "positive", "[0]"});
  expect_error([] { nn::LayerNorm({4, -1}); }, {"LayerNorm", "positive", "[4, -1]"});
  expect_error([] { nn::LayerNorm(4, 0.0); }, {"LayerNorm", "eps", "0"});
  expect_error([] { nn::LayerNorm(4, kNaN); }, {"LayerNorm", "eps", "nan"});
  nn::LayerNorm ln(4);
  expect_error([&] { ln.forward(zeros({2, 5})); }, {"layer_norm", "[*, 4]", "[2, 5]"});
}

}  // namespace
}  // namespace tapegrad
