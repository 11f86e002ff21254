// layer_norm and nn::LayerNorm, rms_norm and nn::RMSNorm on the CPU: values and gradients against
// PyTorch's formulas computed here in double, f64 gradchecks for input and parameters, thread-count
// independence of the parameter gradients, bad inputs, and the modules (parameters, printing,
// state dict). rms_norm adds its default eps, 16-bit inputs and a weight of another dtype.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
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

// Checks that layer_norm and rms_norm share, each given the op normalising the last dim of x.
using NormOverLastDim = std::function<Tensor(const Tensor& x, int64_t cols)>;

void expect_nan_stays_in_its_row(const NormOverLastDim& norm) {
  Tensor x = tensor<double>({1, kNaN, 3, 1, 2, 3}, {2, 3});
  std::vector<double> y = values(norm(x, 3));
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(y[c])) << c;
  for (int c = 3; c < 6; ++c) EXPECT_FALSE(std::isnan(y[c])) << c;
}

void expect_in_place_change_of_saved_input_caught(const NormOverLastDim& norm, uint64_t seed) {
  Tensor x = uniform({3, 4}, kFloat64, seed).requires_grad_(true);
  Tensor h = mul(x, 2.0);
  Tensor y = norm(h, 4);
  {
    NoGradGuard no_grad;
    h.add_(1.0);
  }
  EXPECT_THROW(sum(y).backward(), Error);
}

// The str() of the model the module tests train: Linear(6, 8), the norm module, ReLU, Linear(8, 2).
std::string model_with_norm_str(const std::string& norm) {
  return "Sequential(\n"
         "  (0): Linear(in_features=6, out_features=8, bias=true)\n"
         "  (1): " +
         norm +
         "\n"
         "  (2): ReLU()\n"
         "  (3): Linear(in_features=8, out_features=2, bias=true)\n"
         ")";
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
  expect_nan_stays_in_its_row([](const Tensor& x, int64_t cols) { return layer_norm(x, {cols}); });
}

// The weight and bias gradients sum rows in blocks fixed by the shape (Note [norm parameter
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
  expect_in_place_change_of_saved_input_caught([](const Tensor& x, int64_t cols) { return layer_norm(x, {cols}); }, 16);
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
  EXPECT_EQ(model.str(), model_with_norm_str("LayerNorm((8,), eps=1e-05, elementwise_affine=true)"));
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

// =============================================================================================
// rms_norm
// =============================================================================================

// PyTorch's rms_norm, forward and backward, in double over rows of `cols` values:
//   rstd = 1 / sqrt(mean(x^2) + eps), y = x rstd w (`divisor` replaces N in the mean: N - 1 is the
//   planted bug of the negative control);
//   dx = rstd (dxhat - xhat sum(dxhat xhat) / N), xhat = x rstd, dxhat = dy w;
//   dw = sum over rows of dy xhat.
struct RmsReference {
  std::vector<double> y, dx, dw;
};

RmsReference rms_reference(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy,
                           int64_t cols, double eps, std::optional<int64_t> divisor = std::nullopt) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  RmsReference r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* row = x.data() + i * cols;
    double squares = 0;
    for (int64_t c = 0; c < cols; ++c) squares += row[c] * row[c];
    const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(divisor.value_or(cols)) + eps);
    double sum_dxhat_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = row[c] * rstd, wc = w.empty() ? 1.0 : w[c], g = dy[i * cols + c];
      r.y[i * cols + c] = xhat * wc;
      sum_dxhat_xhat += g * wc * xhat;
      r.dw[c] += g * xhat;
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = row[c] * rstd;
      const double dxhat = dy[i * cols + c] * (w.empty() ? 1.0 : w[c]);
      r.dx[i * cols + c] = rstd * (dxhat - xhat * sum_dxhat_xhat / static_cast<double>(cols));
    }
  }
  return r;
}

// PyTorch's default eps: the epsilon of the compute type (float32 for 16-bit inputs).
double torch_default_eps(DType dtype) {
  return dtype == kFloat64 ? std::numeric_limits<double>::epsilon()
                           : static_cast<double>(std::numeric_limits<float>::epsilon());
}

// Forward values and both gradients against the reference, with and without a weight, with an
// explicit eps and the default one, for shapes that cover one row, rows shorter and longer than the
// 16 vector lanes, several normalised dims, and enough rows (4096 x 33, 3 x 5000) for the OpenMP
// paths and several weight-gradient blocks.
TEST(RmsNorm, ValuesAndGradientsMatchPyTorchFormula) {
  struct Case {
    Shape input, normalized;
  };
  const std::vector<Case> cases = {{{6}, {6}},         {{5, 1}, {1}},       {{4, 15}, {15}},
                                   {{3, 16}, {16}},    {{7, 17}, {17}},     {{2, 3, 4, 5}, {4, 5}},
                                   {{4096, 33}, {33}}, {{3, 5000}, {5000}}, {{2, 3, 4}, {2, 3, 4}}};
  uint64_t seed = 1001;
  for (DType dtype : {kFloat32, kFloat64}) {
    const double tol = dtype == kFloat32 ? 2e-5 : 1e-12;
    for (const Case& c : cases) {
      for (bool with_weight : {true, false}) {
        for (std::optional<double> eps : {std::optional<double>(1e-5), std::optional<double>()}) {
          const int64_t cols = shape_numel(c.normalized);
          const std::string what = shape_str(c.input) + " over " + shape_str(c.normalized) +
                                   (with_weight ? " weight" : " no weight") + (eps ? " eps 1e-5 " : " default eps ") +
                                   dtype_name(dtype);
          Tensor x = uniform(c.input, kFloat64, seed++, -2.0, 3.0);
          Tensor w = with_weight ? uniform(c.normalized, kFloat64, seed++, 0.5, 1.5) : Tensor();
          Tensor dy = uniform(c.input, kFloat64, seed++);
          const RmsReference r = rms_reference(values(x), w.defined() ? values(w) : std::vector<double>{}, values(dy),
                                               cols, eps.value_or(torch_default_eps(dtype)));
          Tensor xt = x.to(dtype).requires_grad_(true);
          Tensor wt = w.defined() ? w.to(dtype).requires_grad_(true) : Tensor();
          Tensor y = rms_norm(xt, c.normalized, wt, eps);
          ASSERT_EQ(y.sizes(), c.input) << what;
          ASSERT_EQ(y.dtype(), dtype) << what;
          expect_allclose(y, from(r.y, c.input, dtype), {tol, tol}, what + " forward");
          y.backward(dy.to(dtype));
          expect_allclose(xt.grad(), from(r.dx, c.input, dtype), {10 * tol, 10 * tol}, what + " grad input");
          // The weight gradient sums over up to 4096 rows.
          if (wt.defined())
            expect_allclose(wt.grad(), from(r.dw, c.normalized, dtype), {10 * tol, 100 * tol}, what + " grad weight");
        }
      }
    }
  }
}

// Negative control for the test above: the reference tells rms_norm from a mean square over N - 1
// and from layer_norm (which subtracts the mean), so a kernel doing either would fail it.
TEST(RmsNorm, ReferenceTellsTheMeanSquareFromNeighbours) {
  Tensor x = uniform({4, 15}, kFloat64, 3, 0.5, 2.0);
  const std::vector<double> got = values(rms_norm(x, {15}, Tensor(), 1e-5));
  const std::vector<double> dy(60, 1.0);
  const RmsReference over_n_minus_1 = rms_reference(values(x), {}, dy, 15, 1e-5, /*divisor=*/14);
  const std::vector<double> centred = values(layer_norm(x, {15}));
  double to_planted = 0, to_layer_norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    to_planted = std::max(to_planted, std::fabs(got[i] - over_n_minus_1.y[i]));
    to_layer_norm = std::max(to_layer_norm, std::fabs(got[i] - centred[i]));
  }
  EXPECT_GT(to_planted, 1e-3);
  EXPECT_GT(to_layer_norm, 1e-1);
}

TEST(RmsNorm, HandComputedValues) {
  // x = [1, 2, 3, 4]: mean square 7.5.
  Tensor x = tensor<double>({1, 2, 3, 4}, {1, 4});
  const double s = 1.0 / std::sqrt(7.5 + 1e-5);
  testing::expect_close(rms_norm(x, {4}, Tensor(), 1e-5), {s, 2 * s, 3 * s, 4 * s}, 1e-15);
  Tensor w = tensor<double>({1, 2, 3, -4}, {4});
  // eps 0.5: mean square + eps = 8.
  const double t = 1.0 / std::sqrt(8.0);
  testing::expect_close(rms_norm(x, {4}, w, 0.5), {t, 4 * t, 9 * t, -16 * t}, 1e-14);
  // A row of zeros: 0 with the default eps, NaN with eps = 0 (0 / 0), as in PyTorch.
  Tensor zero_row = zeros({1, 3});
  testing::expect_close(rms_norm(zero_row, {3}), {0, 0, 0}, 0);
  for (double v : values(rms_norm(zero_row, {3}, Tensor(), 0.0))) EXPECT_TRUE(std::isnan(v));
}

// eps unset is torch.finfo's eps of the compute type: checked on rows whose mean square (1e-8 in
// float32, 1e-16 in float64) is of the order of that eps, so another default would show.
TEST(RmsNorm, DefaultEpsIsTheComputeTypesEpsilon) {
  struct Case {
    DType dtype;
    double scale, eps;
  };
  const double f32_eps = std::numeric_limits<float>::epsilon(), f64_eps = std::numeric_limits<double>::epsilon();
  for (const Case& c : {Case{kFloat32, 1e-4, f32_eps}, Case{kFloat64, 1e-8, f64_eps}, Case{kBFloat16, 1e-4, f32_eps},
                        Case{kFloat16, 1e-4, f32_eps}}) {
    const std::string what = dtype_name(c.dtype);
    Tensor x = mul(uniform({3, 8}, kFloat64, 41, 0.5, 1.5), c.scale).to(c.dtype);
    const std::vector<double> xv = values(x), dy(24, 1.0);
    const bool half = c.dtype == kBFloat16 || c.dtype == kFloat16;
    const double tol = half ? (c.dtype == kBFloat16 ? 8e-3 : 1e-3) : c.dtype == kFloat32 ? 1e-5 : 1e-12;
    const std::vector<double> got = values(rms_norm(x, {8}));
    expect_allclose(tensor<double>(got, {3, 8}), tensor<double>(rms_reference(xv, {}, dy, 8, c.eps).y, {3, 8}),
                    {tol, 0}, what + " default eps");
    // The control: eps 0 and the 16-bit type's own epsilon both give other values.
    for (double other : {0.0, half ? (c.dtype == kBFloat16 ? 0.0078125 : 0.0009765625) : 1e-5}) {
      const std::vector<double> wrong = rms_reference(xv, {}, dy, 8, other).y;
      double largest = 0;
      for (size_t i = 0; i < got.size(); ++i) largest = std::max(largest, std::fabs(got[i] - wrong[i]) / wrong[i]);
      EXPECT_GT(largest, 0.1) << what << " eps " << other;
    }
  }
}

// float16 and bfloat16 inputs are computed in float32 (PyTorch's upcast) and rounded once: the
// result is exactly the float32 op on the same values, rounded; the gradients are close to the
// float32 ones.
TEST(RmsNorm, HalfInputsComputeInFloat) {
  for (DType half : {kFloat16, kBFloat16}) {
    const std::string what = dtype_name(half);
    Tensor x = uniform({37, 300}, kFloat64, 51, -2.0, 2.0).to(half).requires_grad_(true);
    Tensor w = uniform({300}, kFloat64, 52, 0.5, 1.5).to(half).requires_grad_(true);
    Tensor dy = uniform({37, 300}, kFloat64, 53).to(half);
    Tensor y = rms_norm(x, {300}, w);
    ASSERT_EQ(y.dtype(), half) << what;
    Tensor x32 = x.detach().to(kFloat32).requires_grad_(true), w32 = w.detach().to(kFloat32).requires_grad_(true);
    Tensor y32 = rms_norm(x32, {300}, w32);
    expect_allclose(y, y32.to(half), testing::kExact, what + " forward = float32 rounded once");
    y.backward(dy);
    y32.backward(dy.to(kFloat32));
    ASSERT_EQ(x.grad().dtype(), half) << what;
    ASSERT_EQ(w.grad().dtype(), half) << what;
    expect_allclose(x.grad(), x32.grad().to(half), testing::kExact, what + " grad input = float32 rounded once");
    expect_allclose(w.grad(), w32.grad().to(half), testing::kExact, what + " grad weight = float32 rounded once");
  }
}

// A weight of another dtype, as PyTorch: computed in the promoted dtype, returned in the input's
// (nn::RMSNorm's float32 weight on a bfloat16 activation under autocast). Each gradient arrives in
// its own tensor's dtype.
TEST(RmsNorm, WeightOfAnotherDtypeIsPromoted) {
  Tensor x = uniform({5, 40}, kFloat64, 61).to(kBFloat16).requires_grad_(true);
  Tensor w = uniform({40}, kFloat32, 62, 0.5, 1.5).requires_grad_(true);
  Tensor y = rms_norm(x, {40}, w);
  ASSERT_EQ(y.dtype(), kBFloat16);
  expect_allclose(y, rms_norm(x.detach().to(kFloat32), {40}, w.detach()).to(kBFloat16), testing::kExact,
                  "bf16 input, f32 weight");
  sum(y).backward();
  EXPECT_EQ(x.grad().dtype(), kBFloat16);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  // float32 input, float64 weight: computed in float64, returned in float32.
  Tensor x32 = uniform({5, 40}, kFloat32, 63), w64 = uniform({40}, kFloat64, 64);
  Tensor y32 = rms_norm(x32, {40}, w64, 1e-5);
  ASSERT_EQ(y32.dtype(), kFloat32);
  expect_allclose(y32, rms_norm(x32.to(kFloat64), {40}, w64, 1e-5).to(kFloat32), testing::kExact,
                  "f32 input, f64 weight");
}

TEST(RmsNorm, NonContiguousInputAndWeight) {
  Tensor x = uniform({6, 5}, kFloat64, 71).t();  // [5, 6], strides (1, 5)
  Tensor w = uniform({12}, kFloat64, 72).slice(0, 0, 12, 2);
  expect_allclose(rms_norm(x, {6}, w), rms_norm(x.contiguous(), {6}, w.contiguous()), testing::kExact,
                  "transposed input, strided weight");
}

TEST(RmsNorm, NaNStaysInItsRow) {
  expect_nan_stays_in_its_row([](const Tensor& x, int64_t cols) { return rms_norm(x, {cols}); });
}

// The weight gradient sums rows in blocks fixed by the shape (Note [norm parameter gradients]): one
// thread and two give the same bits.
TEST(RmsNorm, WeightGradientDoesNotDependOnThreadCount) {
  testing::ThreadCount thread_count;
  Tensor x = uniform({4096, 64}, kFloat32, 81), dy = uniform({4096, 64}, kFloat32, 82);
  std::vector<Tensor> grads;
  for (int threads : {1, 2}) {
    thread_count.set(threads);
    Tensor w = ones({64}).requires_grad_(true);
    Tensor xt = x.clone().requires_grad_(true);
    rms_norm(xt, {64}, w).backward(dy);
    grads.push_back(w.grad());
    grads.push_back(xt.grad());
  }
  expect_allclose(grads[2], grads[0], testing::kExact, "grad weight");
  expect_allclose(grads[3], grads[1], testing::kExact, "grad input");
}

TEST(RmsNorm, EmptyInputs) {
  // No rows: an empty output, and a weight gradient that is a zero sum.
  Tensor x = zeros({0, 4}, kFloat64).requires_grad_(true);
  Tensor w = ones({4}, kFloat64).requires_grad_(true);
  Tensor y = rms_norm(x, {4}, w);
  EXPECT_EQ(y.sizes(), (Shape{0, 4}));
  sum(y).backward();
  EXPECT_EQ(x.grad().sizes(), (Shape{0, 4}));
  testing::expect_close(w.grad(), {0, 0, 0, 0}, 0);
  // Empty rows: an empty output.
  EXPECT_EQ(rms_norm(zeros({3, 0}), {0}).sizes(), (Shape{3, 0}));
}

TEST(RmsNorm, OnlyTheGradientsAskedForAreComputed) {
  Tensor x = uniform({3, 4}, kFloat64, 91);
  Tensor w = uniform({4}, kFloat64, 92).requires_grad_(true);
  sum(rms_norm(x, {4}, w)).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  // Without any input requiring grad, no node is recorded.
  EXPECT_FALSE(rms_norm(x, {4}, w.detach()).requires_grad());
}

TEST(RmsNorm, InPlaceChangeOfSavedInputIsCaught) {
  expect_in_place_change_of_saved_input_caught([](const Tensor& x, int64_t cols) { return rms_norm(x, {cols}); }, 93);
}

TEST(RmsNormGradcheck, InputAndWeight) {
  using testing::leaf;
  expect_gradcheck([](const std::vector<Tensor>& v) { return rms_norm(v[0], {5}, v[1]); },
                   {leaf({3, 5}, 101), leaf({5}, 102)}, "[3, 5] over [5], default eps");
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return rms_norm(v[0], {3, 4}, v[1], 1e-3);
      },
      {leaf({2, 3, 4}, 103), leaf({3, 4}, 104)}, "[2, 3, 4] over [3, 4], eps 1e-3");
  expect_gradcheck([](const std::vector<Tensor>& v) { return rms_norm(v[0], {7}); }, {leaf({4, 7}, 105)}, "no weight");
  expect_gradcheck([](const std::vector<Tensor>& v) { return rms_norm(v[0].t(), {4}, v[1]); },
                   {leaf({4, 5}, 106), leaf({4}, 107)}, "transposed input");
  expect_gradcheck([](const std::vector<Tensor>& v) { return rms_norm(v[0], {1}, v[1]); },
                   {leaf({3, 1}, 108, 0.5, 1.5), leaf({1}, 109)}, "rows of one");
  // Many rows (several weight-gradient blocks, OpenMP) through a broadcast.
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        Tensor ramp = linspace(0.5, 2.0, 600, kFloat64).unsqueeze(1);
        return sum(rms_norm(v[0].expand({600, 40}) * ramp + v[0], {40}, v[1]), {0});
      },
      {leaf({1, 40}, 110), leaf({40}, 111)}, "600 rows");
}

TEST(RmsNormErrors, NameTheOpAndTheCulprit) {
  Tensor x = zeros({2, 5});
  expect_error([&] { rms_norm(x, {4}); }, {"rms_norm", "normalized_shape=[4]", "[*, 4]", "[2, 5]"});
  expect_error([&] { rms_norm(x, {2, 4}); }, {"rms_norm", "[2, 4]", "[*, 2, 4]", "[2, 5]"});
  expect_error([&] { rms_norm(x, {3, 2, 5}); }, {"rms_norm", "[3, 2, 5]", "[2, 5]"});
  expect_error([&] { rms_norm(x, {}); }, {"rms_norm", "normalized_shape", "[]"});
  expect_error([&] { rms_norm(x, {5}, zeros({4})); }, {"rms_norm", "weight", "[4]", "[5]"});
  expect_error([&] { rms_norm(x, {5}, zeros({1, 5})); }, {"rms_norm", "weight", "[1, 5]", "[5]"});
  expect_error([&] { rms_norm(x, {5}, zeros({5}, kInt64)); }, {"rms_norm", "weight", "int64"});
  expect_error([&] { rms_norm(x, {5}, Tensor(), -1e-5); }, {"rms_norm", "eps", "-1e-05"});
  expect_error([&] { rms_norm(x, {5}, Tensor(), kNaN); }, {"rms_norm", "eps", "nan"});
  expect_error([&] { rms_norm(x, {5}, Tensor(), std::numeric_limits<double>::infinity()); },
               {"rms_norm", "eps", "inf"});
  expect_error([&] { rms_norm(zeros({2, 5}, kInt64), {5}); }, {"rms_norm", "int64"});
  expect_error([&] { rms_norm(Tensor(), {5}); }, {"rms_norm", "undefined"});
  // Negative control: matching calls pass every one of those checks, eps = 0 included (PyTorch's).
  EXPECT_NO_THROW(rms_norm(x, {5}, zeros({5}), 1e-5));
  EXPECT_NO_THROW(rms_norm(x, {2, 5}, zeros({2, 5}), 0.0));
}

// ---------------------------------------------------------------------------------------------
// nn::RMSNorm
// ---------------------------------------------------------------------------------------------

TEST(RMSNormModule, WeightStartsAtOnes) {
  nn::RMSNorm rn(16);
  EXPECT_EQ(rn.normalized_shape(), (Shape{16}));
  EXPECT_FALSE(rn.eps().has_value());
  EXPECT_TRUE(rn.elementwise_affine());
  StateDict state = rn.state_dict();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "weight");
  testing::expect_close(rn.weight, std::vector<double>(16, 1.0), 0);
  EXPECT_TRUE(rn.weight.requires_grad());
  EXPECT_EQ(rn.weight.dtype(), kFloat32);

  nn::RMSNorm two_dims({4, 8}, 1e-6);
  EXPECT_EQ(two_dims.eps(), std::optional<double>(1e-6));
  EXPECT_EQ(two_dims.weight.sizes(), (Shape{4, 8}));

  nn::RMSNorm plain(8, std::nullopt, /*elementwise_affine=*/false);
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_FALSE(plain.weight.defined());
}

TEST(RMSNormModule, PrintsLikePyTorch) {
  EXPECT_EQ(nn::RMSNorm(16).str(), "RMSNorm((16,), eps=None, elementwise_affine=true)");
  EXPECT_EQ(nn::RMSNorm({4, 8}, 1e-6, false).str(), "RMSNorm((4, 8), eps=1e-06, elementwise_affine=false)");
  EXPECT_EQ(nn::RMSNorm(3, 0.001).str(), "RMSNorm((3,), eps=0.001, elementwise_affine=true)");
}

TEST(RMSNormModule, ForwardIsTheFunctionalOpAndTrains) {
  nn::Sequential model(nn::Linear(6, 8), nn::RMSNorm(8), nn::ReLU(), nn::Linear(8, 2));
  EXPECT_EQ(model.str(), model_with_norm_str("RMSNorm((8,), eps=None, elementwise_affine=true)"));
  auto rn = std::dynamic_pointer_cast<nn::RMSNorm>(model[1]);
  ASSERT_NE(rn, nullptr);
  {
    NoGradGuard no_grad;
    rn->weight.copy_(uniform({8}, kFloat32, 121));
  }
  Tensor x = uniform({5, 8}, kFloat32, 122);
  expect_allclose(rn->forward(x), rms_norm(x, {8}, rn->weight), testing::kExact, "module = op");
  // An explicit eps reaches the op.
  nn::RMSNorm with_eps(8, 0.5, false);
  expect_allclose(with_eps.forward(x), rms_norm(x, {8}, Tensor(), 0.5), testing::kExact, "module eps = op eps");
  Tensor out = model.forward(uniform({5, 6}, kFloat32, 123));
  sum(out).backward();
  EXPECT_TRUE(rn->weight.grad().defined());
  // Moving the module moves its parameters, and forward follows.
  model.to(kFloat64);
  EXPECT_EQ(model.forward(uniform({2, 6}, kFloat64, 124)).dtype(), kFloat64);
}

// Under autocast the Linear before it returns bfloat16 while the weight stays float32: the op
// promotes (PyTorch has no autocast entry for rms_norm), returns bfloat16, and the weight's
// gradient arrives in float32.
TEST(RMSNormModule, TrainsUnderAutocast) {
  nn::Linear linear(6, 8);
  nn::RMSNorm rn(8);
  Tensor y;
  {
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    y = rn.forward(linear.forward(uniform({4, 6}, kFloat32, 125)));
  }
  EXPECT_EQ(y.dtype(), kBFloat16);
  sum(y.to(kFloat32)).backward();
  ASSERT_TRUE(rn.weight.grad().defined());
  EXPECT_EQ(rn.weight.grad().dtype(), kFloat32);
  EXPECT_TRUE(linear.weight.grad().defined());
}

TEST(RMSNormModule, StateDictRoundTrip) {
  nn::RMSNorm a({2, 3}), b({2, 3});
  {
    NoGradGuard no_grad;
    a.weight.copy_(uniform({2, 3}, kFloat32, 126));
  }
  b.load_state_dict(a.state_dict());
  expect_allclose(b.weight, a.weight, testing::kExact, "weight");
  nn::RMSNorm plain({2, 3}, std::nullopt, false);
  expect_error([&] { plain.load_state_dict(a.state_dict()); }, {"Unexpected key", "weight"});
}

TEST(RMSNormModule, BadSettingsThrow) {
  expect_error([] { nn::RMSNorm(Shape{}); }, {"RMSNorm", "normalized_shape", "[]"});
  expect_error([] { nn::RMSNorm(0); }, {"RMSNorm", "positive", "[0]"});
  expect_error([] { nn::RMSNorm({4, -1}); }, {"RMSNorm", "positive", "[4, -1]"});
  expect_error([] { nn::RMSNorm(4, -1.0); }, {"RMSNorm", "eps", "-1"});
  expect_error([] { nn::RMSNorm(4, kNaN); }, {"RMSNorm", "eps", "nan"});
  EXPECT_NO_THROW(nn::RMSNorm(4, 0.0));
  nn::RMSNorm rn(4);
  expect_error([&] { rn.forward(zeros({2, 5})); }, {"rms_norm", "[*, 4]", "[2, 5]"});
}

}  // namespace
}  // namespace tapegrad
