// Functional dropout (PyTorch's F.dropout) and its two users: nn::Dropout and the LSTM's dropout
// between layers, which must give the same numbers as before they shared it (the reference below
// is the composition both used: keep = rand >= p, x * keep / (1 - p)).
#include <cmath>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::values;

// The formula, in double, from the same uniform draws.
std::vector<double> reference(const Tensor& x, double p, uint64_t seed, uint64_t offset = 0) {
  Generator g(seed);
  g.set_state(seed, offset);
  std::vector<double> u = values(rand(x.sizes(), TensorOptions(x.dtype()).device(x.device()), &g));
  std::vector<double> xs = values(x), out;
  for (size_t i = 0; i < xs.size(); ++i) out.push_back(u[i] >= p ? xs[i] / (1.0 - p) : 0.0);
  return out;
}

TEST(FunctionalDropout, MatchesTheFormulaForTheGeneratorState) {
  Tensor x = testing::leaf({7, 9}, 3).detach();
  Generator g(42);
  Tensor y = dropout(x, 0.3, true, &g);
  expect_close(y, reference(x, 0.3, 42), 1e-12);
  // The generator advanced, so the next call draws a new mask (negative control for a fixed mask).
  const uint64_t offset = g.offset();
  EXPECT_GT(offset, 0u);
  Tensor y2 = dropout(x, 0.3, true, &g);
  EXPECT_GT(max(abs(sub(y, y2))).item(), 0.0);
  expect_close(y2, reference(x, 0.3, 42, offset), 1e-12);
}

TEST(FunctionalDropout, ModuleAndFunctionalAgree) {
  Tensor x = randn({4, 5});
  Generator a(7), b(7);
  nn::Dropout drop(0.4, &a);
  expect_close(drop(x), dropout(x, 0.4, true, &b), 0);
  EXPECT_EQ(a.offset(), b.offset());
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
}

TEST(FunctionalDropout, IdentityWhenNotTrainingOrPZeroAndZerosAtPOne) {
  Tensor x = randn({3, 3});
  Generator g(1);
  EXPECT_TRUE(dropout(x, 0.5, false, &g).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, &g).is_same(x));
  Tensor z = dropout(x, 1.0, true, &g);
  expect_close(z, std::vector<double>(9, 0.0), 0);
  EXPECT_EQ(g.offset(), 0u);  // none of these drew a number
  // Integer tensors pass through when nothing is dropped.
  Tensor ints = tensor<int64_t>({1, 2});
  EXPECT_TRUE(dropout(ints, 0.5, false).is_same(ints));
}

TEST(FunctionalDropout, GradientIsTheSameMaskAndScale) {
  auto fn = [](const std::vector<Tensor>& in) {
    Generator g(5);  // a fixed mask on every call, so finite differences see one function
    return dropout(in[0], 0.25, true, &g);
  };
  auto result = autograd::gradcheck(fn, {testing::leaf({4, 6}, 9)});
  EXPECT_TRUE(result.ok) << result.report;
  Tensor x = testing::leaf({4, 6}, 9);
  sum(fn({x})).backward();
  std::vector<double> ones_out = reference(ones({4, 6}, kFloat64), 0.25, 5);
  expect_close(x.grad(), ones_out, 1e-12);  // d/dx = keep / (1 - p)
}

TEST(FunctionalDropout, BadInputIsAClearError) {
  Tensor x = ones({3});
  expect_error([&] { dropout(x, 1.5); }, {"dropout", "between 0 and 1", "1.5"});
  expect_error([&] { dropout(x, -0.1); }, {"dropout", "-0.1"});
  expect_error([&] { dropout(tensor<int64_t>({1, 2}), 0.5); }, {"dropout", "floating-point", "int64"});
  expect_error([&] { dropout(Tensor(), 0.5); }, {"dropout", "undefined"});
}

TEST(LstmDropout, SameNumbersAsTheCompositionItReplaced) {
  const int64_t T = 4, B = 3, I = 5, H = 6;
  const double p = 0.35;
  manual_seed(21);
  Generator lstm_gen(77);
  nn::LSTM lstm(I, H, nn::LSTMOptions().num_layers(3).dropout(p), &lstm_gen);
  Tensor x = randn({T, B, I});
  lstm_gen.set_state(77, 1000);
  Tensor got = lstm.forward(x).output;

  // The reference: lstm_layer per layer, and between layers the old inline dropout.
  Generator ref_gen(77);
  ref_gen.set_state(77, 1000);
  StateDict params = lstm.state_dict();
  auto param = [&](const std::string& n) {
    for (auto& [k, t] : params)
      if (k == n) return t;
    return Tensor();
  };
  Tensor zero = zeros({B, H});
  Tensor layer_input = x;
  for (int layer = 0; layer < 3; ++layer) {
    const std::string s = "_l" + std::to_string(layer);
    layer_input = lstm_layer(layer_input, zero, zero, param("weight_ih" + s), param("weight_hh" + s),
                             param("bias_ih" + s), param("bias_hh" + s))
                      .output;
    if (layer + 1 < 3) {
      Tensor keep = ge(rand(layer_input.sizes(), TensorOptions(x.dtype()), &ref_gen), p);
      layer_input = mul(layer_input, mul(keep.to(x.dtype()), 1.0 / (1.0 - p)));
    }
  }
  expect_close(got, layer_input, 0);
  EXPECT_EQ(lstm_gen.offset(), ref_gen.offset());
  // Negative control: the dropout did act (eval gives other numbers).
  lstm.eval();
  EXPECT_GT(max(abs(sub(lstm.forward(x).output, got))).item(), 1e-4);
}

}  // namespace
}  // namespace tapegrad
