// linear_relu (tapegrad/ops/linalg.h) against relu(linear(...)): the same bits without a tape (the
// product is the same, the clamp runs in place), the same two tape nodes and gradients with one;
// bad inputs named as linear_relu's. nn::Sequential's use of it: a Linear followed by a ReLU is
// fused only when nothing is recorded, and never where a hook or a subclass could tell.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/random_values.h"
#include "support/test_util.h"
#include "tapegrad/amp/autocast.h"

namespace tapegrad {
namespace {

using testing::expect_error;

// Centred on 0, so that about half of the outputs are negative before the clamp.
Tensor centred(const Shape& shape, DType dtype, uint64_t seed) {
  return testing::uniform(shape, dtype, seed);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && testing::values(a) == testing::values(b);
}

TEST(LinearRelu, WithoutATapeEqualsReluOfLinearBitForBit) {
  for (DType dtype : {kFloat32, kFloat64})
    for (bool with_bias : {true, false})
      for (const Shape& x_shape : std::vector<Shape>{{1, 37}, {5, 37}, {64, 37}, {37}, {3, 4, 37}}) {
        const Tensor x = centred(x_shape, dtype, 1), w = centred({23, 37}, dtype, 2);
        const Tensor b = with_bias ? centred({23}, dtype, 3) : Tensor();
        const Tensor want = relu(linear(x, w, b));
        for (int mode = 0; mode < 2; ++mode) {
          Tensor got;
          if (mode == 0) {
            NoGradGuard guard;
            got = linear_relu(x, w, b);
          } else {
            InferenceMode guard;
            got = linear_relu(x, w, b);
            EXPECT_TRUE(got.is_inference());
          }
          EXPECT_TRUE(same_bits(got, want)) << dtype << " bias " << with_bias << " x " << x_shape.size() << "-D";
          EXPECT_FALSE(got.requires_grad());
        }
      }
}

// At the edges: no rows, and NaN and infinite inputs, which reach the output as relu(linear) has
// them (a NaN stays NaN through the clamp).
TEST(LinearRelu, EmptyBatchAndNonFiniteValuesAsReluOfLinear) {
  const Tensor w = centred({6, 4}, kFloat32, 2), b = centred({6}, kFloat32, 3);
  NoGradGuard guard;
  const Tensor empty = linear_relu(centred({0, 4}, kFloat32, 1), w, b);
  EXPECT_EQ(empty.sizes(), (Shape{0, 6}));
  Tensor x = centred({3, 4}, kFloat32, 1);
  x.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[6] = std::numeric_limits<float>::infinity();
  x.data<float>()[11] = -std::numeric_limits<float>::infinity();
  const std::vector<double> got = testing::values(linear_relu(x, w, b)), want = testing::values(relu(linear(x, w, b)));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << i;
    else
      EXPECT_EQ(got[i], want[i]) << i;
  }
}

// Negative control: the bit comparison sees an output that was not clamped.
TEST(LinearRelu, BitComparisonSeesAMissingClamp) {
  const Tensor x = centred({5, 37}, kFloat32, 1), w = centred({23, 37}, kFloat32, 2), b = centred({23}, kFloat32, 3);
  NoGradGuard guard;
  EXPECT_TRUE(same_bits(linear_relu(x, w, b), relu(linear(x, w, b))));
  EXPECT_FALSE(same_bits(linear_relu(x, w, b), linear(x, w, b)));
}

TEST(LinearRelu, WithATapeGivesTheGradientsOfReluOfLinear) {
  auto run = [](bool fused) {
    Tensor x = centred({6, 9}, kFloat64, 4).requires_grad_(), w = centred({5, 9}, kFloat64, 5).requires_grad_();
    Tensor b = centred({5}, kFloat64, 6).requires_grad_();
    Tensor y = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
    EXPECT_TRUE(y.requires_grad());
    sum(mul(y, centred({6, 5}, kFloat64, 7))).backward();
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const std::vector<Tensor> fused = run(true), plain = run(false);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bits(fused[i], plain[i])) << "result " << i;
  Tensor x = centred({3, 4}, kFloat64, 8).requires_grad_(), w = centred({2, 4}, kFloat64, 9).requires_grad_();
  auto result = autograd::gradcheck([](const std::vector<Tensor>& v) { return linear_relu(v[0], v[1], v[2]); },
                                    {x, w, centred({2}, kFloat64, 10).requires_grad_()});
  EXPECT_TRUE(result.ok) << result.report;
}

TEST(LinearRelu, UnderAutocastEqualsReluOfLinear) {
  const Tensor x = centred({16, 64}, kFloat32, 11), w = centred({32, 64}, kFloat32, 12);
  const Tensor b = centred({32}, kFloat32, 13);
  amp::AutocastGuard autocast(kCPU, kBFloat16);
  NoGradGuard guard;
  const Tensor got = linear_relu(x, w, b), want = relu(linear(x, w, b));
  EXPECT_EQ(got.dtype(), kBFloat16);
  EXPECT_TRUE(same_bits(got, want));
}

TEST(LinearRelu, BadInputsAreNamedAsLinearRelu) {
  const Tensor x = centred({2, 3}, kFloat32, 1), w = centred({4, 3}, kFloat32, 2);
  expect_error([&] { linear_relu(x, centred({4, 5}, kFloat32, 2)); }, {"linear_relu", "[2, 3]", "[4, 5]"});
  expect_error([&] { linear_relu(x, w, centred({5}, kFloat32, 3)); }, {"linear_relu", "bias", "[5]"});
  expect_error([&] { linear_relu(x, centred({4}, kFloat32, 2)); }, {"linear_relu", "weight must be 2-D"});
  expect_error([&] { linear_relu(Tensor(), w); }, {"linear_relu"});
  expect_error([&] { linear_relu(full({2, 3}, 1.0, kInt64), w); }, {"linear_relu"});
}

// Sequential(Linear, ReLU, Linear) gives the same outputs fused or not, in every grad mode.
TEST(LinearRelu, SequentialFusesOnlyWhenNothingIsRecorded) {
  Generator g(5);
  nn::Sequential model(nn::Linear(12, 16, true, &g), nn::ReLU(), nn::Linear(16, 3, true, &g));
  const Tensor x = centred({4, 12}, kFloat32, 14);
  Tensor recorded = model(x);
  EXPECT_TRUE(recorded.requires_grad());
  Tensor unfused = (*model[2])((*model[1])((*model[0])(x))).detach();
  EXPECT_TRUE(same_bits(recorded.detach(), unfused));
  NoGradGuard guard;
  EXPECT_TRUE(same_bits(model(x), unfused));
}

// A hook on either module sees its own call, so the pair is not fused; a subclass of ReLU may
// compute something else, so it is not fused either.
TEST(LinearRelu, SequentialKeepsHookedModulesAndSubclassesApart) {
  struct ShiftedReLU : nn::ReLU {
    Tensor forward(const Tensor& input) override { return add(nn::ReLU::forward(input), 1.0); }
  };
  Generator g(6);
  auto linear = std::make_shared<nn::Linear>(12, 16, true, &g);
  auto relu_module = std::make_shared<nn::ReLU>();
  nn::Sequential hooked{linear, relu_module};
  int relu_calls = 0, linear_calls = 0;
  auto relu_hook = relu_module->register_forward_hook([&](nn::Module&, const auto&, const auto&) { ++relu_calls; });
  const Tensor x = centred({4, 12}, kFloat32, 15);
  NoGradGuard guard;
  const Tensor want = relu(linear->forward(x));
  EXPECT_TRUE(same_bits(hooked(x), want));
  EXPECT_EQ(relu_calls, 1);
  relu_hook.remove();
  auto linear_hook = linear->register_forward_hook([&](nn::Module&, const auto&, const auto&) { ++linear_calls; });
  EXPECT_TRUE(same_bits(hooked(x), want));
  EXPECT_EQ(linear_calls, 1);
  linear_hook.remove();

  nn::Sequential shifted{linear, std::make_shared<ShiftedReLU>()};
  EXPECT_TRUE(same_bits(shifted(x), add(want, 1.0)));
}

}  // namespace
}  // namespace tapegrad
