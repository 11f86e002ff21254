// The CPU's vectorisable float exp, tanh and sigmoid (src/cpu/loops/vec_math.h) against double-precision
// libm over a dense sweep of every float range, edge values included, both in the vectorised loops
// the kernels use and as plain scalar calls; then the kernels that use them, through the ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/loops/vec_math.h"
#include "cpu/loops/vec_math_avx512.h"
#include "support/multiply_add_contraction.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using cpu::vec::exp;
using cpu::vec::sigmoid;
using cpu::vec::tanh;

// A few ulp: float's ulp is 6e-8 to 1.2e-7 of a value, and libm's float functions are within 1 ulp.
constexpr double kMaxRelativeError = 4e-7;
constexpr float kFloatMax = std::numeric_limits<float>::max();
constexpr double kSmallestSubnormal = 1.4012984643248171e-45;  // 2^-149

// The loops the kernels run, compiled per instruction set like theirs.
TG_VECTOR_CLONES void exp_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp(x[i]);
}
TG_VECTOR_CLONES void tanh_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tanh(x[i]);
}
TG_VECTOR_CLONES void sigmoid_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}

// One element at a time through a function the compiler does not inline, so the scalar code is
// what runs (the baseline build turns the selects into branches).
__attribute__((noinline)) float exp_scalar(float x) {
  return exp(x);
}
__attribute__((noinline)) float tanh_scalar(float x) {
  return tanh(x);
}
__attribute__((noinline)) float sigmoid_scalar(float x) {
  return sigmoid(x);
}

double exp_reference(double x) {
  return std::exp(x);
}
double tanh_reference(double x) {
  return std::tanh(x);
}
double sigmoid_reference(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

float float_from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Every float whose bit pattern is a multiple of `stride`, both signs, plus the special values.
std::vector<float> sweep(uint32_t stride) {
  std::vector<float> xs;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += stride)
    xs.push_back(float_from_bits(static_cast<uint32_t>(bits)));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {0.0f, -0.0f, inf, -inf, nan, -nan, kFloatMax, -kFloatMax, std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()})
    xs.push_back(x);
  return xs;
}

// Every float in [lo, hi] (same sign): where the formulas switch or the results leave the normal range.
std::vector<float> every_float(float lo, float hi) {
  std::vector<float> xs;
  for (float x = lo; x <= hi; x = std::nextafter(x, hi + 1.0f)) xs.push_back(x);
  return xs;
}

struct Errors {
  double max_relative = 0;
  float worst_input = 0;
  int64_t failures = 0;
  std::string first_failure;
};

// Checks y = f(x) against the double reference: NaN for NaN, inf and zero (with their signs) where
// the rounded reference has them, one subnormal step for subnormal results, else a relative bound.
void check_value(float x, float y, double reference, Errors* e) {
  auto fail = [&](const char* why) {
    if (e->failures++ == 0)
      e->first_failure = std::string(why) + ": f(" + std::to_string(x) + ") = " + std::to_string(y) + ", expected " +
                         std::to_string(reference);
  };
  if (std::isnan(reference)) {
    if (!std::isnan(y)) fail("NaN expected");
    return;
  }
  if (std::isnan(y)) return fail("unexpected NaN");
  const float rounded = static_cast<float>(reference);
  if (std::isinf(y) || std::isinf(rounded)) {
    // At the overflow threshold either neighbour is fine.
    const bool near_max = std::fabs(reference) >= kFloatMax * (1.0 - kMaxRelativeError);
    if (y != rounded && !(near_max && std::signbit(y) == std::signbit(reference))) fail("overflow");
    return;
  }
  if (reference == 0.0 || rounded == 0.0f) {
    if (std::fabs(y) > kSmallestSubnormal || std::signbit(y) != std::signbit(reference)) fail("zero");
    return;
  }
  if (std::fabs(reference) < std::numeric_limits<float>::min()) {
    if (std::fabs(y - reference) > kSmallestSubnormal) fail("subnormal");
    return;
  }
  const double relative = std::fabs(y - reference) / std::fabs(reference);
  if (relative > e->max_relative) {
    e->max_relative = relative;
    e->worst_input = x;
  }
  if (relative > kMaxRelativeError) fail("relative error");
}

using Loop = void (*)(const float*, float*, int64_t);
using Scalar = float (*)(float);
using Reference = double (*)(double);

void check_loop(const char* name, Loop loop, Reference reference, const std::vector<float>& xs) {
  std::vector<float> ys(xs.size());
  loop(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  Errors e;
  for (size_t i = 0; i < xs.size(); ++i) check_value(xs[i], ys[i], reference(xs[i]), &e);
  EXPECT_EQ(e.failures, 0) << name << ": " << e.failures << " failures, first " << e.first_failure;
  EXPECT_LE(e.max_relative, kMaxRelativeError) << name << " at " << e.worst_input;
  // In place, as a kernel overwriting its input runs it: same values.
  std::vector<float> in_place = xs;
  loop(in_place.data(), in_place.data(), static_cast<int64_t>(in_place.size()));
  EXPECT_EQ(std::memcmp(in_place.data(), ys.data(), ys.size() * sizeof(float)), 0) << name << " in place";
}

void check_scalar(const char* name, Scalar f, Reference reference, const std::vector<float>& xs) {
  Errors e;
  for (float x : xs) check_value(x, f(x), reference(x), &e);
  EXPECT_EQ(e.failures, 0) << name << ": " << e.failures << " failures, first " << e.first_failure;
}

TEST(VecMath, ExpOverTheWholeRange) {
  check_loop("exp", exp_loop, exp_reference, sweep(97));
  check_loop("exp near overflow", exp_loop, exp_reference, every_float(88.0f, 89.0f));
  check_loop("exp into the subnormals", exp_loop, exp_reference, every_float(-105.0f, -86.0f));
  check_scalar("exp scalar", exp_scalar, exp_reference, sweep(1009));
}

TEST(VecMath, TanhOverTheWholeRange) {
  check_loop("tanh", tanh_loop, tanh_reference, sweep(97));
  check_loop("tanh around the switch at 0.625", tanh_loop, tanh_reference, every_float(0.5f, 0.75f));
  check_loop("tanh, negative side", tanh_loop, tanh_reference, every_float(-0.75f, -0.5f));
  check_scalar("tanh scalar", tanh_scalar, tanh_reference, sweep(1009));
}

TEST(VecMath, SigmoidOverTheWholeRange) {
  check_loop("sigmoid", sigmoid_loop, sigmoid_reference, sweep(97));
  check_loop("sigmoid into the subnormals", sigmoid_loop, sigmoid_reference, every_float(-105.0f, -86.0f));
  check_scalar("sigmoid scalar", sigmoid_scalar, sigmoid_reference, sweep(1009));
}

TEST(VecMath, SpecialValuesAsLibm) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (Scalar f : {exp_scalar, tanh_scalar, sigmoid_scalar}) EXPECT_TRUE(std::isnan(f(nan)));
  EXPECT_EQ(exp_scalar(inf), inf);
  EXPECT_EQ(exp_scalar(-inf), 0.0f);
  EXPECT_EQ(exp_scalar(0.0f), 1.0f);
  EXPECT_EQ(exp_scalar(-0.0f), 1.0f);
  EXPECT_EQ(exp_scalar(100.0f), inf);
  EXPECT_EQ(tanh_scalar(inf), 1.0f);
  EXPECT_EQ(tanh_scalar(-inf), -1.0f);
  EXPECT_EQ(tanh_scalar(20.0f), 1.0f);
  EXPECT_TRUE(tanh_scalar(-0.0f) == 0.0f && std::signbit(tanh_scalar(-0.0f)));
  EXPECT_EQ(tanh_scalar(1e-30f), 1e-30f);  // tanh(x) = x to float precision for tiny x
  EXPECT_EQ(sigmoid_scalar(inf), 1.0f);
  EXPECT_EQ(sigmoid_scalar(-inf), 0.0f);
  EXPECT_EQ(sigmoid_scalar(0.0f), 0.5f);
  EXPECT_GT(sigmoid_scalar(-100.0f), 0.0f);  // exp(-100) / (1 + exp(-100)) is a normal float
  // Double precision is libm's.
  for (double x : {-800.0, -3.5, -1e-10, 0.0, 0.3, 7.25, 710.0}) {
    EXPECT_EQ(exp(x), std::exp(x));
    EXPECT_EQ(tanh(x), std::tanh(x));
    EXPECT_EQ(sigmoid(x), 1.0 / (1.0 + std::exp(-x)));
  }
}

// ---------------------------------------------------------------------------------------------
// The kernels that use them, through the ops: float results against the same op in double.
// ---------------------------------------------------------------------------------------------

Tensor float_input(const Shape& shape, uint64_t seed, double scale) {
  Generator g(seed);
  return mul(randn(shape, kFloat32, &g), scale);
}

void expect_relative(const Tensor& actual, const Tensor& expected, double relative, double absolute,
                     const std::string& what) {
  std::vector<double> a = testing::values(actual), b = testing::values(expected);
  ASSERT_EQ(a.size(), b.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= absolute + relative * std::fabs(b[i])) && bad++ < 3)
      ADD_FAILURE() << what << " at " << i << ": " << a[i] << " vs " << b[i];
  EXPECT_EQ(bad, 0) << what;
}

#ifdef TG_HAVE_VEC_MATH_AVX512
// Note [activations in AVX-512 registers]: the intrinsic exp, sigmoid and tanh give the bits of the
// loops above (their AVX-512 clones, which the kernels ran before) for 2^20 floats strided over every
// bit pattern (NaNs, infinities, subnormals and both signs among them) and the edges of each formula:
// the clamps, the shifter's range, tanh's switch at 0.625, overflow, underflow. The exhaustive check
// over all 2^32 floats is tools/checks/vec_math_avx512_exhaustive.cpp. The control: one result moved
// by one ulp is seen. Only where the compiler fuses the scalar code's multiply-adds, as the release
// build does (support/multiply_add_contraction.h).
using Loop = void (*)(const float*, float*, int64_t);
__attribute__((target("avx512f"))) void in_registers(int which, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    _mm512_storeu_ps(y + i, which == 0   ? cpu::vec512::exp(v)
                            : which == 1 ? cpu::vec512::sigmoid(v)
                                         : cpu::vec512::tanh(v));
  }
}

TEST(VecMath, InRegistersGiveTheBitsOfTheVectorisedLoops) {
  if (!cpu::vec512::available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  if (!testing::build_contracts_multiply_adds())
    GTEST_SKIP() << "this build does not fuse multiply-adds (-O1): its vectorised loops are not the release build's";
  std::vector<float> x;
  for (uint64_t k = 0; k < (uint64_t{1} << 20); ++k) {
    const auto u = static_cast<uint32_t>(k * 4099u + (k >> 7));  // an odd stride: every exponent, both signs
    float v;
    std::memcpy(&v, &u, sizeof v);
    x.push_back(v);
  }
  for (float v : {0.0f,
                  -0.0f,
                  0.625f,
                  -0.625f,
                  0.62499994f,
                  88.8f,
                  88.72f,
                  88.73f,
                  -104.0f,
                  -103.9f,
                  -87.3f,
                  -88.0f,
                  -103.28f,
                  44.0f,
                  45.0f,
                  1e-30f,
                  -1e-30f,
                  1e-45f,
                  kFloatMax,
                  -kFloatMax,
                  std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  while (x.size() % 16 != 0) x.push_back(1.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  const Loop loops[] = {exp_loop, sigmoid_loop, tanh_loop};
  const char* names[] = {"exp", "sigmoid", "tanh"};
  for (int which = 0; which < 3; ++which) {
    std::vector<float> want(x.size()), got(x.size());
    loops[which](x.data(), want.data(), n);
    in_registers(which, x.data(), got.data(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&want[i], &got[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << names[which];
    got[12345] = std::nextafter(got[12345], kFloatMax);  // the control
    EXPECT_NE(std::memcmp(want.data(), got.data(), x.size() * sizeof(float)), 0) << names[which];
  }
}
#endif

TEST(VecMathKernels, UnaryOpsContiguousAndStrided) {
  // Odd sizes leave vector tails; 200003 elements is past the parallel grain.
  for (int64_t n : {1, 15, 17, 1000, 200003}) {
    Tensor x = float_input({n}, 7, 6.0);
    Tensor xd = x.to(kFloat64);
    const std::string size = " of " + std::to_string(n);
    expect_relative(x.exp(), xd.exp(), kMaxRelativeError, 0, "exp" + size);
    expect_relative(x.tanh(), xd.tanh(), kMaxRelativeError, 0, "tanh" + size);
    expect_relative(x.sigmoid(), xd.sigmoid(), kMaxRelativeError, 0, "sigmoid" + size);
  }
  Tensor m = float_input({33, 65}, 8, 4.0);
  Tensor t = m.t();  // strided
  expect_relative(t.tanh(), t.to(kFloat64).tanh(), kMaxRelativeError, 0, "tanh of a transpose");
  expect_relative(t.sigmoid(), t.to(kFloat64).sigmoid(), kMaxRelativeError, 0, "sigmoid of a transpose");
}

TEST(VecMathKernels, SoftmaxAndCrossEntropyMatchDouble) {
  for (int64_t cols : {1, 10, 17, 1000}) {
    Tensor x = float_input({37, cols}, 11, 5.0);
    Tensor xd = x.to(kFloat64);
    const std::string shape = " of [37, " + std::to_string(cols) + "]";
    expect_relative(softmax(x, -1), softmax(xd, -1), 2e-6, 1e-12, "softmax" + shape);
    expect_relative(log_softmax(x, -1), log_softmax(xd, -1), 2e-6, 2e-6, "log_softmax" + shape);

    Generator g(12);
    Tensor target = randint(0, cols, {37}, TensorOptions(kInt64), &g);
    for (double smoothing : {0.0, 0.1}) {
      CrossEntropyOptions options;
      options.label_smoothing = smoothing;
      Tensor xf = x.detach().requires_grad_(true), xdd = xd.detach().requires_grad_(true);
      Tensor loss = cross_entropy(xf, target, options), loss_d = cross_entropy(xdd, target, options);
      expect_relative(loss, loss_d, 2e-6, 1e-6, "cross_entropy" + shape);
      loss.backward();
      loss_d.backward();
      expect_relative(xf.grad(), xdd.grad(), 2e-6, 1e-8, "cross_entropy gradient" + shape);
    }
    // The softmax backward (both kinds), through a weighted sum.
    Tensor w = float_input({37, cols}, 13, 1.0);
    for (bool log : {false, true}) {
      Tensor xf = x.detach().requires_grad_(true), xdd = xd.detach().requires_grad_(true);
      Tensor y = log ? log_softmax(xf, -1) : softmax(xf, -1), yd = log ? log_softmax(xdd, -1) : softmax(xdd, -1);
      sum(mul(y, w)).backward();
      sum(mul(yd, w.to(kFloat64))).backward();
      expect_relative(xf.grad(), xdd.grad(), 1e-5, 1e-6,
                      std::string(log ? "log_softmax" : "softmax") + " backward" + shape);
    }
  }
}

TEST(VecMathKernels, LstmLayerMatchesDouble) {
  // Hidden 37 leaves vector tails; batch 300 x hidden 37 crosses the cell's parallel grain.
  for (int64_t batch : {1, 300}) {
    const int64_t steps = 5, input = 6, hidden = 37;
    Tensor x = float_input({steps, batch, input}, 21, 1.0), h0 = float_input({batch, hidden}, 22, 0.5),
           c0 = float_input({batch, hidden}, 23, 2.0), w_ih = float_input({4 * hidden, input}, 24, 0.4),
           w_hh = float_input({4 * hidden, hidden}, 25, 0.3), b_ih = float_input({4 * hidden}, 26, 0.5),
           b_hh = float_input({4 * hidden}, 27, 0.5);
    std::vector<Tensor> f = {x, h0, c0, w_ih, w_hh, b_ih, b_hh}, d;
    for (Tensor& t : f) {
      d.push_back(t.to(kFloat64).requires_grad_(true));
      t.requires_grad_(true);
    }
    LstmLayerOutput of = lstm_layer(f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
    LstmLayerOutput od = lstm_layer(d[0], d[1], d[2], d[3], d[4], d[5], d[6]);
    const std::string b = " at batch " + std::to_string(batch);
    expect_relative(of.output, od.output, 1e-5, 1e-6, "lstm output" + b);
    expect_relative(of.c_n, od.c_n, 1e-5, 1e-6, "lstm c_n" + b);
    add(sum(of.output), sum(of.c_n)).backward();
    add(sum(od.output), sum(od.c_n)).backward();
    for (size_t i = 0; i < f.size(); ++i)
      expect_relative(f[i].grad(), d[i].grad(), 1e-4, 1e-5, "lstm gradient " + std::to_string(i) + b);
  }
}

}  // namespace
}  // namespace tapegrad
