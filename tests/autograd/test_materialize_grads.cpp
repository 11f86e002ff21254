// A node recorded with materialize_grads = false gets an undefined gradient for an output that
// received none (the engine fills no zero for it); every other node still gets a zero, and a
// retained gradient of such an output is still a zero tensor.
#include <vector>

#include "support/test_util.h"
#include "tapegrad/autograd/node.h"

namespace tapegrad {
namespace {

using testing::values;

struct Seen {
  bool first = false, second = false, called = false;
};

// Records a node with two outputs (x and 2x) that adds up whichever output gradients are defined.
std::vector<Tensor> two_outputs(const Tensor& x, bool materialize, Seen* seen) {
  Tensor a = x.detach().clone(), b = mul(x.detach(), 2.0);
  autograd::record(
      "two_outputs", {x}, {a, b},
      [seen](const std::vector<Tensor>& g) {
        seen->called = true;
        seen->first = g[0].defined();
        seen->second = g[1].defined();
        Tensor gx;
        if (g[0].defined()) gx = g[0];
        if (g[1].defined()) gx = gx.defined() ? add(gx, mul(g[1], 2.0)) : mul(g[1], 2.0);
        return std::vector<Tensor>{gx};
      },
      materialize);
  return {a, b};
}

TEST(MaterializeGrads, AnUnusedOutputArrivesUndefinedOnlyWhenAsked) {
  for (bool materialize : {true, false}) {
    Tensor x = tensor<double>({1, 2, 3}, {3}).requires_grad_(true);
    Seen seen;
    std::vector<Tensor> out = two_outputs(x, materialize, &seen);
    sum(out[0]).backward();
    ASSERT_TRUE(seen.called);
    EXPECT_TRUE(seen.first);
    // The control: the default still gets a (zero) tensor for the unused output.
    EXPECT_EQ(seen.second, materialize);
    EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 1})) << materialize;
  }
}

TEST(MaterializeGrads, BothOutputsUsedArriveDefined) {
  Tensor x = tensor<double>({1, 2}, {2}).requires_grad_(true);
  Seen seen;
  std::vector<Tensor> out = two_outputs(x, false, &seen);
  sum(add(out[0], out[1])).backward();
  EXPECT_TRUE(seen.first && seen.second);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 3}));
}

TEST(MaterializeGrads, ARetainedUnusedOutputGetsZeros) {
  Tensor x = tensor<double>({1, 2}, {2}).requires_grad_(true);
  Seen seen;
  std::vector<Tensor> out = two_outputs(x, false, &seen);
  out[1].retain_grad();
  sum(out[0]).backward();
  EXPECT_FALSE(seen.second);
  ASSERT_TRUE(out[1].grad().defined());
  EXPECT_EQ(values(out[1].grad()), (std::vector<double>{0, 0}));
}

// The LSTM's node takes undefined gradients for its unused outputs: the gradients when only h_n
// is used equal those with the other outputs used through a zero factor (materialised zeros).
TEST(MaterializeGrads, LstmWithUnusedOutputsMatchesExplicitZeros) {
  Generator g(4);
  const int64_t steps = 5, batch = 2, input = 3, hidden = 4;
  Tensor x = randn({steps, batch, input}, kFloat64, &g);
  Tensor h0 = randn({batch, hidden}, kFloat64, &g), c0 = randn({batch, hidden}, kFloat64, &g);
  Tensor w_ih = randn({4 * hidden, input}, kFloat64, &g), w_hh = randn({4 * hidden, hidden}, kFloat64, &g);
  Tensor b_ih = randn({4 * hidden}, kFloat64, &g), b_hh = randn({4 * hidden}, kFloat64, &g);
  std::vector<std::vector<double>> grads[2];
  for (int explicit_zeros : {0, 1}) {
    std::vector<Tensor> leaves = {x, h0, c0, w_ih, w_hh, b_ih, b_hh};
    for (Tensor& t : leaves) t = t.detach().clone().requires_grad_(true);
    LstmLayerOutput out = lstm_layer(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], leaves[5], leaves[6]);
    Tensor loss = sum(mul(out.h_n, out.h_n));
    if (explicit_zeros) loss = add(loss, add(sum(mul(out.output, 0.0)), sum(mul(out.c_n, 0.0))));
    loss.backward();
    for (const Tensor& t : leaves) grads[explicit_zeros].push_back(values(t.grad()));
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_EQ(grads[0][i].size(), grads[1][i].size());
    for (size_t k = 0; k < grads[0][i].size(); ++k)
      EXPECT_NEAR(grads[0][i][k], grads[1][i][k], 1e-12) << "input " << i << " element " << k;
  }
}

}  // namespace
}  // namespace tapegrad
