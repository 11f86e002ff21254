// The fused LSTM layer op against an independent reference: the same recurrence written step by
// step with basic ops through autograd. Forward and gradients in f32, and gradcheck in f64, for
// forward and reverse directions and variable-length batches.
#include <cmath>

#include "test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

struct LstmInputs {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths;
};

LstmInputs make_inputs(int64_t T, int64_t B, int64_t I, int64_t H, DType dtype, bool with_lengths, uint64_t seed) {
  Generator g(seed);
  auto r = [&](Shape s, double scale) { return mul(randn(s, kFloat64, &g), scale).to(dtype).requires_grad_(); };
  LstmInputs in{r({T, B, I}, 1.0), r({B, H}, 0.5), r({B, H}, 0.5), r({4 * H, I}, 0.4), r({4 * H, H}, 0.4),
                r({4 * H}, 0.2), r({4 * H}, 0.2), Tensor()};
  if (with_lengths) {
    std::vector<int64_t> lens;
    for (int64_t b = 0; b < B; ++b) lens.push_back(b == 0 ? T : std::max<int64_t>(0, T - 1 - b));
    in.lengths = tensor<int64_t>(lens);
  }
  return in;
}

// The recurrence written out with elementary differentiable ops.
LstmLayerOutput reference(const LstmInputs& in, bool reverse) {
  const int64_t T = in.x.size(0), B = in.x.size(1);
  Tensor h = in.h0, c = in.c0;
  std::vector<Tensor> outputs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    int64_t t = reverse ? T - 1 - s : s;
    Tensor z = add(linear(in.x.select(0, t), in.w_ih, in.b_ih), linear(h, in.w_hh, in.b_hh));
    std::vector<Tensor> parts = chunk(z, 4, 1);
    Tensor i = sigmoid(parts[0]), f = sigmoid(parts[1]), g = tanh(parts[2]), o = sigmoid(parts[3]);
    Tensor c_new = add(mul(f, c), mul(i, g));
    Tensor h_new = mul(o, tanh(c_new));
    if (in.lengths.defined()) {
      Tensor m = lt(full({B, 1}, static_cast<double>(t), kInt64), in.lengths.view({B, 1})).to(in.x.dtype());
      h = add(mul(m, h_new), mul(1.0 - m, h));
      c = add(mul(m, c_new), mul(1.0 - m, c));
      outputs[static_cast<size_t>(t)] = mul(m, h_new);
    } else {
      h = h_new;
      c = c_new;
      outputs[static_cast<size_t>(t)] = h_new;
    }
  }
  return {stack(outputs, 0), h, c};
}

// A scalar that weighs every output differently, so each gradient is distinct.
Tensor objective(const LstmLayerOutput& r, uint64_t seed) {
  Generator g(seed);
  Tensor wo = randn(r.output.sizes(), r.output.dtype(), &g);
  Tensor wh = randn(r.h_n.sizes(), r.h_n.dtype(), &g);
  Tensor wc = randn(r.c_n.sizes(), r.c_n.dtype(), &g);
  return add(add(sum(mul(r.output, wo)), sum(mul(r.h_n, wh))), sum(mul(r.c_n, wc)));
}

double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  std::vector<double> va = testing::values(a), vb = testing::values(b);
  for (size_t i = 0; i < va.size(); ++i) {
    diff += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
}

struct Case {
  const char* name;
  bool reverse, lengths;
};

class LstmLayer : public ::testing::TestWithParam<Case> {};

TEST_P(LstmLayer, MatchesStepByStepReferenceInFloat32) {
  const Case& c = GetParam();
  LstmInputs in = make_inputs(6, 4, 5, 7, kFloat32, c.lengths, 11);
  LstmLayerOutput fused = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths, c.reverse);
  LstmLayerOutput ref = reference(in, c.reverse);
  EXPECT_LT(relative_error(fused.output, ref.output), 1e-5);
  EXPECT_LT(relative_error(fused.h_n, ref.h_n), 1e-5);
  EXPECT_LT(relative_error(fused.c_n, ref.c_n), 1e-5);

  std::vector<Tensor> leaves{in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh};
  objective(fused, 5).backward();
  std::vector<Tensor> fused_grads;
  for (Tensor& t : leaves) {
    fused_grads.push_back(t.grad());
    t.set_grad(Tensor());
  }
  objective(ref, 5).backward();
  const char* names[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
  for (size_t i = 0; i < leaves.size(); ++i)
    EXPECT_LT(relative_error(fused_grads[i], leaves[i].grad()), 1e-5) << "gradient of " << names[i];
}

TEST_P(LstmLayer, GradcheckInFloat64) {
  const Case& c = GetParam();
  LstmInputs in = make_inputs(4, 3, 2, 3, kFloat64, c.lengths, 12);
  Tensor lengths = in.lengths;
  bool reverse = c.reverse;
  auto result = autograd::gradcheck(
      [lengths, reverse](const std::vector<Tensor>& v) {
        LstmLayerOutput r = lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], lengths, reverse);
        return cat({r.output.reshape({-1}), r.h_n.reshape({-1}), r.c_n.reshape({-1})}, 0);
      },
      {in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh});
  EXPECT_TRUE(result.ok) << result.report;
}

INSTANTIATE_TEST_SUITE_P(Ops, LstmLayer,
                         ::testing::Values(Case{"forward", false, false}, Case{"reverse", true, false},
                                           Case{"forward_lengths", false, true}, Case{"reverse_lengths", true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LstmLayerOp, PaddedStepsAreZeroAndKeepTheState) {
  LstmInputs in = make_inputs(5, 3, 2, 4, kFloat64, true, 13);  // lengths {5, 3, 2}
  LstmLayerOutput r = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths);
  for (double v : testing::values(r.output.narrow(0, 3, 2).select(1, 1))) EXPECT_EQ(v, 0.0);
  testing::expect_close(r.h_n.select(0, 1), r.output.select(0, 2).select(0, 1), 0);
}

TEST(LstmLayerOp, BadInputsAreErrors) {
  LstmInputs in = make_inputs(3, 2, 4, 5, kFloat32, false, 14);
  expect_error([&] { lstm_layer(in.x.select(0, 0), in.h0, in.c0, in.w_ih, in.w_hh); }, {"lstm", "[T, B, I]"});
  expect_error([&] { lstm_layer(in.x, in.h0, in.c0, in.w_hh, in.w_hh); }, {"lstm", "weight_ih"});
  expect_error([&] { lstm_layer(in.x, in.h0.narrow(0, 0, 1), in.c0, in.w_ih, in.w_hh); }, {"lstm", "[1, 5]", "[2, 5]"});
  expect_error([&] { lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, Tensor(), Tensor(), tensor<int64_t>({1, 9})); },
               {"lstm", "length 9"});
  expect_error([&] { lstm_layer(in.x.to(kFloat64), in.h0, in.c0, in.w_ih, in.w_hh); }, {"lstm", "float32"});
}

}  // namespace
}  // namespace tapegrad
