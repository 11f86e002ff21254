// nn::Embedding and tapegrad::embedding with padding_idx and max_norm, against PyTorch's
// documented behaviour: N(0, 1) init with a zero padding row, lookups, the padding row's zero
// gradient, in-place renormalisation of the looked-up rows, gradchecks and bad input.
#include <cmath>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::values;

Tensor i64(const std::vector<int64_t>& v, const Shape& shape = {}) {
  return tensor<int64_t>(v, shape);
}

// weight[i][j] = 10 i + j, as float32.
Tensor table(int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(static_cast<float>(10 * i + j));
  return tensor<float>(v, {rows, cols});
}

void set_weight(nn::Embedding& e, const Tensor& value) {
  NoGradGuard no_grad;
  e.weight.copy_(value);
}

TEST(Embedding, InitIsStandardNormalWithTheZeroPaddingRow) {
  Generator g(11);
  nn::Embedding e(2000, 50, 7, std::nullopt, 2.0, &g);
  EXPECT_EQ(e.weight.sizes(), (Shape{2000, 50}));
  EXPECT_TRUE(e.weight.requires_grad() && e.weight.is_leaf());
  EXPECT_EQ(e.parameters().size(), 1u);
  expect_close(e.weight.select(0, 7), std::vector<double>(50, 0.0), 0);
  std::vector<double> v = values(e.weight);
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  const double stddev = std::sqrt(sq / static_cast<double>(v.size()));
  EXPECT_NEAR(mean, 0.0, 0.01);  // 100000 draws: the sample mean's sd is 0.003
  EXPECT_NEAR(stddev, 1.0, 0.01);
  // Same generator state, same table; another seed, another table.
  Generator g2(11), g3(12);
  expect_close(nn::Embedding(2000, 50, 7, std::nullopt, 2.0, &g2).weight, e.weight, 0);
  EXPECT_GT(max(abs(sub(nn::Embedding(2000, 50, 7, std::nullopt, 2.0, &g3).weight, e.weight))).item(), 0.1);
}

TEST(Embedding, NegativePaddingIdxCountsFromTheEnd) {
  nn::Embedding e(5, 2, -1);
  ASSERT_TRUE(e.padding_idx().has_value());
  EXPECT_EQ(*e.padding_idx(), 4);
  expect_close(e.weight.select(0, 4), {0, 0}, 0);
  EXPECT_EQ(e.str(), "Embedding(5, 2, padding_idx=4)");
  EXPECT_EQ(nn::Embedding(10, 3).str(), "Embedding(10, 3)");
  EXPECT_EQ(nn::Embedding(10, 3, std::nullopt, 1.5, 1.0).str(), "Embedding(10, 3, max_norm=1.5, norm_type=1.0)");
}

TEST(Embedding, ForwardLooksUpRowsForAnyIndexShape) {
  nn::Embedding e(5, 3);
  set_weight(e, table(5, 3));
  Tensor out = e(i64({1, 4, 1, 0}, {2, 2}));
  EXPECT_EQ(out.sizes(), (Shape{2, 2, 3}));
  expect_close(out, {10, 11, 12, 40, 41, 42, 10, 11, 12, 0, 1, 2}, 0);
  expect_close(e(tensor<int32_t>({3})), {30, 31, 32}, 0);
  EXPECT_EQ(e(scalar_tensor(2, kInt64)).sizes(), (Shape{3}));
  EXPECT_EQ(e(i64({}, {0})).sizes(), (Shape{0, 3}));
  // It is a UnaryModule, so it sits in a Sequential.
  nn::Sequential model(nn::Embedding(6, 4), nn::Linear(4, 2));
  EXPECT_EQ(model.forward(i64({0, 5, 2}, {3})).sizes(), (Shape{3, 2}));
}

TEST(Embedding, PaddingRowGetsZeroGradientButIsLookedUp) {
  nn::Embedding e(4, 2, 1);
  set_weight(e, table(4, 2));  // the padding row is now non-zero, so its values must still come out
  Tensor idx = i64({1, 2, 1, 3, 2, 2}, {2, 3});
  Tensor out = e(idx);
  expect_close(out.select(0, 0).select(0, 0), {10, 11}, 0);
  // Upstream gradient g[b][t][j] = b + t + j + 1: the gradient of row r sums it over the places r is used.
  Tensor g = empty({2, 3, 2});
  {
    std::vector<float> gv;
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 3; ++t)
        for (int j = 0; j < 2; ++j) gv.push_back(static_cast<float>(b + t + j + 1));
    g = tensor<float>(gv, {2, 3, 2});
  }
  out.backward(g);
  // row 0: unused; row 1: padding (used at (0,0) and (0,2)) -> 0; row 2 at (0,1), (1,1), (1,2);
  // row 3 at (1,0).
  expect_close(e.weight.grad(), {0, 0, 0, 0, 2 + 3 + 4, 3 + 4 + 5, 2, 3}, 0);

  // Negative control: without padding_idx the same row does get its gradient.
  nn::Embedding plain(4, 2);
  set_weight(plain, table(4, 2));
  plain(idx).backward(g);
  expect_close(plain.weight.grad().select(0, 1), {1 + 3, 2 + 4}, 0);
}

TEST(Embedding, FunctionalPaddingMatchesTheModuleAndAcceptsNegativeIndex) {
  Tensor w = table(4, 2).requires_grad_(true);
  Tensor idx = i64({3, 0, 3});
  sum(embedding(w, idx, -1)).backward();  // -1 is row 3
  expect_close(w.grad(), {1, 1, 0, 0, 0, 0, 0, 0}, 0);
  expect_close(embedding(w, idx, 3), embedding(w, idx), 0);  // values are the plain lookup's
}

TEST(Embedding, Gradcheck) {
  using autograd::gradcheck;
  Tensor idx = i64({1, 5, 1, 0, 2, 5}, {2, 3});
  auto plain = gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx, std::nullopt); },
                         {testing::leaf({6, 3}, 1)});
  EXPECT_TRUE(plain.ok) << plain.report;
  // A padding index that the input does not use: an ordinary lookup.
  auto unused_pad =
      gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx, 4); }, {testing::leaf({6, 3}, 2)});
  EXPECT_TRUE(unused_pad.ok) << unused_pad.report;
  // A used padding index: finite differences see the padding row's value, which the analytic
  // gradient deliberately ignores, so the row is held constant (multiplied by 0) before the lookup;
  // the other rows' gradients must still be exact with padding entries among the indices.
  Tensor row_mask = tensor<double>({1, 1, 1, 1, 1, 0}, {6, 1});
  auto used_pad = gradcheck([&](const std::vector<Tensor>& in) { return embedding(mul(in[0], row_mask), idx, 5); },
                            {testing::leaf({6, 3}, 3)});
  EXPECT_TRUE(used_pad.ok) << used_pad.report;
  // Negative control: without the mask, finite differences do see the used padding row, and the
  // check must flag exactly that row (its analytic gradient is 0).
  auto unmasked =
      gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], idx, 5); }, {testing::leaf({6, 3}, 3)});
  EXPECT_FALSE(unmasked.ok);
  EXPECT_NE(unmasked.report.find("element 15: analytic 0"), std::string::npos) << unmasked.report;
  // A non-contiguous weight.
  auto transposed = gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0].t(), idx, 3); },
                              {testing::leaf({3, 6}, 4)});
  EXPECT_TRUE(transposed.ok) << transposed.report;
}

TEST(Embedding, MaxNormRenormalisesLookedUpRowsInPlace) {
  // Rows: [3, 4] (norm 5), [0.3, 0.4] (norm 0.5), [6, 8] (norm 10, never looked up).
  nn::Embedding e(3, 2, std::nullopt, 1.0);
  set_weight(e, tensor<float>({3, 4, 0.3f, 0.4f, 6, 8}, {3, 2}));
  Tensor out = e(i64({0, 1, 0}));
  const double s = 1.0 / (5.0 + 1e-7);  // PyTorch: max_norm / (norm + 1e-7), once per distinct row
  expect_close(e.weight, {3 * s, 4 * s, 0.3, 0.4, 6, 8}, 1e-6);
  expect_close(out, {3 * s, 4 * s, 0.3, 0.4, 3 * s, 4 * s}, 1e-6);
  EXPECT_TRUE(e.weight.is_leaf() && e.weight.requires_grad());
  // The lookup is still differentiable (the rescale itself is not recorded).
  sum(out).backward();
  expect_close(e.weight.grad(), {2, 2, 1, 1, 0, 0}, 0);
  // A second lookup finds the row within the bound (norm 1 - 2e-8) and leaves it.
  std::vector<double> before = values(e.weight);
  e(i64({0}));
  expect_close(e.weight, before, 0);
}

TEST(Embedding, MaxNormWithOtherNorms) {
  // L1: |3| + |-4| = 7.
  Tensor w = tensor<double>({3, -4, 0.5, 0.25}, {2, 2});
  embedding(w, i64({0, 1}), std::nullopt, 2.0, 1.0);
  const double s1 = 2.0 / (7.0 + 1e-7);
  expect_close(w, {3 * s1, -4 * s1, 0.5, 0.25}, 1e-12);
  // Infinity norm: max |x| = 4.
  Tensor v = tensor<double>({3, -4, 0.5, 0.25}, {2, 2});
  embedding_renorm_(v, i64({0, 0, 1}), 2.0, INFINITY);
  const double si = 2.0 / (4.0 + 1e-7);
  expect_close(v, {3 * si, -4 * si, 0.5, 0.25}, 1e-12);
  // Negative control: a max_norm above every norm changes nothing.
  Tensor u = tensor<double>({3, -4, 0.5, 0.25}, {2, 2});
  embedding_renorm_(u, i64({0, 1}), 100.0);
  expect_close(u, {3, -4, 0.5, 0.25}, 0);
}

TEST(Embedding, BadInputIsAClearError) {
  nn::Embedding e(5, 3);
  expect_error([&] { e(tensor<float>({1, 2})); }, {"embedding", "int64 or int32", "float32"});
  expect_error([&] { e(i64({1, 7})); }, {"embedding", "7", "5"});
  expect_error([&] { e(i64({-1})); }, {"embedding", "-1"});
  expect_error([] { nn::Embedding(5, 3, 5); }, {"Embedding", "padding_idx 5", "num_embeddings (5)"});
  expect_error([] { nn::Embedding(5, 3, -6); }, {"Embedding", "padding_idx -6"});
  expect_error([] { nn::Embedding(0, 3); }, {"Embedding", "positive"});
  expect_error([] { nn::Embedding(5, 3, std::nullopt, -1.0); }, {"Embedding", "max_norm", "-1"});
  expect_error([] { nn::Embedding(5, 3, std::nullopt, 1.0, 0.0); }, {"Embedding", "norm_type", "0"});
  Tensor w = table(5, 3);
  expect_error([&] { embedding(w, i64({0}), 9); }, {"embedding", "padding_idx 9"});
  expect_error([&] { embedding(w, i64({9}), std::nullopt, 1.0); }, {"embedding", "9", "out of range"});
  expect_error([&] { embedding(w, i64({0}), std::nullopt, 1.0, -2.0); }, {"embedding_renorm_", "norm_type"});
  expect_error([&] { embedding(tensor<float>({1, 2}), i64({0}), 0); }, {"embedding", "[2]"});
  // A bad index in a max_norm lookup leaves the table untouched.
  nn::Embedding n(3, 2, std::nullopt, 0.5);
  set_weight(n, tensor<float>({3, 4, 6, 8, 1, 1}, {3, 2}));
  expect_error([&] { n(i64({0, 3})); }, {"embedding", "3"});
  expect_close(n.weight, {3, 4, 6, 8, 1, 1}, 0);
}

}  // namespace
}  // namespace tapegrad
