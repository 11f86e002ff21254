// The fast paths of the layer ops, each against a plain composition of basic ops: linear as one
// node (bias folded into the GEMM, no gradient for an input that needs none), matrix-vector
// products (GEMV for one output row or column), the LSTM op at batch 1 with outputs left unused
// (the engine's broadcast zero gradients), and cross-entropy with its reduction in the same node.
#include <cmath>
#include <limits>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::leaf;

bool all_finite_values(const Tensor& t) {
  for (double v : testing::values(t))
    if (!std::isfinite(v)) return false;
  return true;
}

// --- linear ---------------------------------------------------------------------------------

// x W^T + b written without linear (mm on an explicit transpose, broadcast add).
Tensor linear_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = mm(x, w.t());
  return b.defined() ? add(y, b) : y;
}

TEST(LinearFastPath, MatchesReferenceValuesAndGradients) {
  for (int64_t batch : {1, 3, 7}) {
    SCOPED_TRACE(batch);
    Tensor x = leaf({batch, 5}, 1), w = leaf({4, 5}, 2), b = leaf({4}, 3);
    Tensor x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_(),
           b2 = b.detach().clone().requires_grad_();
    Tensor y = linear(x, w, b), y2 = linear_reference(x2, w2, b2);
    expect_close(y, y2, 1e-12);
    Tensor probe = leaf({batch, 4}, 4).detach();
    sum(mul(y, probe)).backward();
    sum(mul(y2, probe)).backward();
    expect_close(x.grad(), x2.grad(), 1e-12);
    expect_close(w.grad(), w2.grad(), 1e-12);
    expect_close(b.grad(), b2.grad(), 1e-12);
    EXPECT_TRUE(w.grad().is_contiguous());  // written in the weight's own layout
  }
}

TEST(LinearFastPath, NoGradientForAnInputThatNeedsNone) {
  Tensor x = leaf({3, 5}, 5).detach();  // a data batch
  Tensor w = leaf({4, 5}, 6), b = leaf({4}, 7);
  sum(relu(linear(x, w, b))).backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(b.grad().defined());
  // A frozen weight: only the input and the bias get gradients.
  Tensor x2 = leaf({3, 5}, 8), w2 = leaf({4, 5}, 9).detach(), b2 = leaf({4}, 10);
  sum(linear(x2, w2, b2)).backward();
  EXPECT_TRUE(x2.grad().defined());
  EXPECT_FALSE(w2.grad().defined());
  expect_close(b2.grad(), std::vector<double>(4, 3.0), 1e-12);  // the column sum of ones [3, 4]
}

TEST(LinearFastPath, GradcheckBatchOneNoBiasAndDataInput) {
  auto check = [](const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& in) {
    autograd::GradcheckResult r = autograd::gradcheck(fn, in);
    EXPECT_TRUE(r.ok) << r.report;
  };
  check([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
        {leaf({1, 6}, 11), leaf({3, 6}, 12), leaf({3}, 13)});
  check([](const std::vector<Tensor>& v) { return linear(v[0], v[1]); }, {leaf({4, 6}, 14), leaf({1, 6}, 15)});
  check([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
        {leaf({4, 6}, 16).detach(), leaf({3, 6}, 17), leaf({3}, 18)});
  check([](const std::vector<Tensor>& v) { return linear(v[0].t(), v[1], v[2]); },  // strided input
        {leaf({6, 4}, 19), leaf({3, 6}, 20), leaf({3}, 21)});
}

TEST(LinearFastPath, EmptyBatch) {
  Tensor x = leaf({0, 5}, 22), w = leaf({4, 5}, 23), b = leaf({4}, 24);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.sizes(), (Shape{0, 4}));
  sum(y).backward();
  expect_close(w.grad(), std::vector<double>(20, 0.0));
  expect_close(b.grad(), std::vector<double>(4, 0.0));
}

// --- matrix-vector products -------------------------------------------------------------------

// a @ b with every product written as an elementwise multiply and a sum.
Tensor mm_reference(const Tensor& a, const Tensor& b) {
  return sum(mul(a.unsqueeze(2), b.unsqueeze(0)), {1});
}

TEST(MatrixVectorProducts, EveryOperandLayout) {
  Tensor m = leaf({6, 5}, 30).detach(), mt = leaf({5, 6}, 31).detach().t();  // [6, 5], both layouts
  Tensor row = leaf({1, 6}, 32).detach(), row_strided = leaf({6, 3}, 33).detach().t().narrow(0, 1, 1);
  Tensor col = leaf({5, 1}, 34).detach(), col_strided = leaf({3, 5}, 35).detach().t().narrow(1, 2, 1);
  Tensor row_broadcast = leaf({1, 1}, 36).detach().expand({1, 6});  // stride 0
  for (const Tensor& mat : {m, mt}) {
    for (const Tensor& r : {row, row_strided, row_broadcast}) expect_close(mm(r, mat), mm_reference(r, mat), 1e-12);
    for (const Tensor& c : {col, col_strided}) expect_close(mm(mat, c), mm_reference(mat, c), 1e-12);
  }
  Tensor one = leaf({1, 5}, 37).detach(), single = leaf({5, 1}, 38).detach();  // [1, 1] output
  expect_close(mm(one, single), mm_reference(one, single), 1e-12);
}

TEST(MatrixVectorProducts, AccumulateWithBetaAndAlpha) {
  // Each matrix in both layouts (row-major, and the transpose of a row-major matrix).
  Tensor a = leaf({1, 4}, 40).detach(), input = leaf({1, 3}, 42).detach();
  for (const Tensor& b : {leaf({4, 3}, 41).detach(), leaf({3, 4}, 46).detach().t()})
    expect_close(addmm(input, a, b, 0.5, -2.0), add(mul(input, 0.5), mul(mm_reference(a, b), -2.0)), 1e-12);
  Tensor v = leaf({4, 1}, 44).detach(), in_col = leaf({3, 1}, 45).detach();
  for (const Tensor& c : {leaf({3, 4}, 43).detach(), leaf({4, 3}, 47).detach().t()})
    expect_close(addmm(in_col, c, v, 1.5, 0.25), add(mul(in_col, 1.5), mul(mm_reference(c, v), 0.25)), 1e-12);
}

TEST(MatrixVectorProducts, UninitialisedOutputNeverLeaks) {
  // Freed NaN blocks are what a caching allocator hands out next; beta = 0 must set, not scale.
  for (int i = 0; i < 4; ++i) {
    { Tensor poison = full({1, 64}, std::numeric_limits<double>::quiet_NaN(), kFloat32); }
    { Tensor poison = full({64, 1}, std::numeric_limits<double>::quiet_NaN(), kFloat32); }
    Tensor a = ones({1, 16}, kFloat32), b = ones({16, 64}, kFloat32);
    EXPECT_TRUE(all_finite_values(mm(a, b)));
    EXPECT_TRUE(all_finite_values(mm(b.t(), a.t())));
  }
}

// --- the LSTM op at batch 1 ---------------------------------------------------------------------

struct LstmParams {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

LstmParams lstm_params(int64_t input, int64_t hidden, uint64_t seed) {
  return {mul(leaf({4 * hidden, input}, seed), 0.5).detach().requires_grad_(),
          mul(leaf({4 * hidden, hidden}, seed + 1), 0.5).detach().requires_grad_(),
          mul(leaf({4 * hidden}, seed + 2), 0.2).detach().requires_grad_(),
          mul(leaf({4 * hidden}, seed + 3), 0.2).detach().requires_grad_()};
}

LstmParams clone_params(const LstmParams& p) {
  auto c = [](const Tensor& t) { return t.detach().clone().requires_grad_(); };
  return {c(p.w_ih), c(p.w_hh), c(p.b_ih), c(p.b_hh)};
}

// The last state of the recurrence written with elementary ops.
Tensor lstm_last_state_reference(const Tensor& x, const LstmParams& p, bool reverse) {
  const int64_t steps = x.size(0), batch = x.size(1), hidden = p.w_hh.size(1);
  Tensor h = zeros({batch, hidden}, x.dtype()), c = zeros({batch, hidden}, x.dtype());
  for (int64_t s = 0; s < steps; ++s) {
    int64_t t = reverse ? steps - 1 - s : s;
    Tensor z = add(linear_reference(x.select(0, t), p.w_ih, p.b_ih), linear_reference(h, p.w_hh, p.b_hh));
    std::vector<Tensor> parts = chunk(z, 4, 1);
    c = add(mul(sigmoid(parts[1]), c), mul(sigmoid(parts[0]), tanh(parts[2])));
    h = mul(sigmoid(parts[3]), tanh(c));
  }
  return h;
}

TEST(LstmFastPath, BatchOneOnlyLastStateUsed) {
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    const int64_t steps = 5, input = 3, hidden = 4;
    Tensor x = leaf({steps, 1, input}, 50).detach();  // data: no gradient wanted
    LstmParams p = lstm_params(input, hidden, 51), q = clone_params(p);
    Tensor zero = zeros({1, hidden}, kFloat64);
    // Only h_n feeds the loss: output and c_n reach backward as the engine's broadcast zeros.
    LstmLayerOutput r = lstm_layer(x, zero, zero, p.w_ih, p.w_hh, p.b_ih, p.b_hh, Tensor(), reverse);
    Tensor h_ref = lstm_last_state_reference(x, q, reverse);
    expect_close(r.h_n, h_ref, 1e-12);
    Tensor probe = leaf({1, hidden}, 52).detach();
    sum(mul(r.h_n, probe)).backward();
    sum(mul(h_ref, probe)).backward();
    expect_close(p.w_ih.grad(), q.w_ih.grad(), 1e-10);
    expect_close(p.w_hh.grad(), q.w_hh.grad(), 1e-10);
    expect_close(p.b_ih.grad(), q.b_ih.grad(), 1e-10);
    expect_close(p.b_hh.grad(), q.b_hh.grad(), 1e-10);
  }
}

TEST(LstmFastPath, GradcheckBatchOneThroughLastStateOnly) {
  for (bool reverse : {false, true}) {
    auto fn = [reverse](const std::vector<Tensor>& v) {
      return lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], Tensor(), reverse).h_n;
    };
    std::vector<Tensor> in = {leaf({4, 1, 2}, 60),
                              mul(leaf({1, 3}, 61), 0.5).detach().requires_grad_(),
                              mul(leaf({1, 3}, 62), 0.5).detach().requires_grad_(),
                              mul(leaf({12, 2}, 63), 0.5).detach().requires_grad_(),
                              mul(leaf({12, 3}, 64), 0.5).detach().requires_grad_(),
                              leaf({12}, 65),
                              leaf({12}, 66)};
    autograd::GradcheckResult r = autograd::gradcheck(fn, in);
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(LstmFastPath, SingleStepAndEmptySequence) {
  LstmParams p = lstm_params(2, 3, 70);
  Tensor h0 = leaf({2, 3}, 71), c0 = leaf({2, 3}, 72);
  // One step: the recurrent weight gradient comes from h0 alone.
  LstmLayerOutput one = lstm_layer(leaf({1, 2, 2}, 73).detach(), h0, c0, p.w_ih, p.w_hh, p.b_ih, p.b_hh);
  sum(one.output).backward();
  EXPECT_TRUE(all_finite_values(p.w_hh.grad()));
  EXPECT_TRUE(h0.grad().defined() && c0.grad().defined());
  // No steps: the state passes through, and the weights get zero gradients.
  LstmParams q = lstm_params(2, 3, 74);
  Tensor h1 = leaf({2, 3}, 75), c1 = leaf({2, 3}, 76);
  LstmLayerOutput none = lstm_layer(zeros({0, 2, 2}, kFloat64), h1, c1, q.w_ih, q.w_hh, q.b_ih, q.b_hh);
  sum(add(none.h_n, none.c_n)).backward();
  expect_close(h1.grad(), std::vector<double>(6, 1.0));
  expect_close(q.w_hh.grad(), std::vector<double>(36, 0.0));
  expect_close(q.b_ih.grad(), std::vector<double>(12, 0.0));
}

// --- cross-entropy --------------------------------------------------------------------------

TEST(CrossEntropyFastPath, ReductionsMatchLogSoftmaxReference) {
  Tensor target = tensor<int64_t>({2, 0, -100, 1});
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    SCOPED_TRACE(static_cast<int>(reduction));
    Tensor z = leaf({4, 3}, 80), z2 = z.detach().clone().requires_grad_();
    CrossEntropyOptions options;
    options.reduction = reduction;
    Tensor loss = cross_entropy(z, target, options);
    Tensor loss2 = nll_loss(log_softmax(z2, 1), target, options);
    expect_close(loss, loss2, 1e-12);
    Tensor weight = reduction == Reduction::None ? leaf({4}, 81).detach() : full({}, 1.7, kFloat64);
    sum(mul(loss, weight)).backward();
    sum(mul(loss2, weight)).backward();
    expect_close(z.grad(), z2.grad(), 1e-12);
  }
  autograd::GradcheckResult r = autograd::gradcheck(
      [&](const std::vector<Tensor>& v) { return cross_entropy(v[0], target); }, {leaf({4, 3}, 82)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(CrossEntropyFastPath, UnbatchedInput) {
  Tensor z = leaf({5}, 90), z2 = z.detach().clone().requires_grad_();
  Tensor target = tensor<int64_t>({3}).reshape({});
  for (Reduction reduction : {Reduction::Mean, Reduction::None}) {
    CrossEntropyOptions options;
    options.reduction = reduction;
    Tensor loss = cross_entropy(z, target, options);
    EXPECT_EQ(loss.dim(), 0);
  }
  cross_entropy(z, target).backward();
  nll_loss(log_softmax(z2.unsqueeze(0), 1), target.reshape({1})).backward();
  expect_close(z.grad(), z2.grad(), 1e-12);
}

}  // namespace
}  // namespace tapegrad
