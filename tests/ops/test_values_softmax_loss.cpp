// Forward values of softmax, log_softmax and the losses against long-double references.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using namespace reference;

// ---------------------------------------------------------------------------------------------
// Softmax and losses
// ---------------------------------------------------------------------------------------------

TEST(SoftmaxValues, LastDimAndOtherDims) {
  for (DType dt : {kFloat64, kFloat32}) {
    double rt = dt == kFloat32 ? 2e-6 : 1e-12, at = dt == kFloat32 ? 1e-6 : 1e-14;
    std::vector<double> v = data_for(dt, 15, 71, -3, 3);
    Tensor x = make(v, {3, 5}, dt);
    std::vector<double> sm = softmax_rows_ref(v, 3, 5, false), lsm = softmax_rows_ref(v, 3, 5, true);
    expect_values(softmax(x, -1), sm, rt, at, "softmax -1");
    expect_values(softmax(x, 1), sm, rt, at, "softmax 1");
    expect_values(log_softmax(x, 1), lsm, rt, at, "log_softmax 1");
    expect_values(x.softmax(1), sm, rt, at, "softmax method");
    expect_values(x.log_softmax(-1), lsm, rt, at, "log_softmax method");
    // Rows sum to 1.
    expect_values(sum(softmax(x, 1), {1}), {1, 1, 1}, 0, 1e-6);
    // dim 0: softmax of the columns.
    std::vector<double> vt = transpose_ref(v, 3, 5);
    expect_values(softmax(x, 0), transpose_ref(softmax_rows_ref(vt, 5, 3, false), 5, 3), rt, at, "softmax 0");
    expect_values(log_softmax(x, 0), transpose_ref(softmax_rows_ref(vt, 5, 3, true), 5, 3), rt, at, "log_softmax 0");
    expect_values(sum(softmax(x, 0), {0}), {1, 1, 1, 1, 1}, 0, 1e-6);
  }
  // Middle dim of a 3-D tensor.
  std::vector<double> v3 = uniform_values(24, 72, -2, 2);
  Tensor x3 = make(v3, {2, 3, 4});
  std::vector<double> want(24);
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c) {
      double total = 0;
      for (int b = 0; b < 3; ++b) total += std::exp(v3[(a * 3 + b) * 4 + c]);
      for (int b = 0; b < 3; ++b) want[(a * 3 + b) * 4 + c] = std::exp(v3[(a * 3 + b) * 4 + c]) / total;
    }
  expect_values(softmax(x3, 1), want, 1e-12, 1e-14, "softmax middle dim");
  expect_values(softmax(x3, -2), want, 1e-12, 1e-14, "softmax dim -2");
  // 0-dim.
  EXPECT_DOUBLE_EQ(softmax(scalar_tensor(3.0, kFloat64), 0).item(), 1.0);
  EXPECT_DOUBLE_EQ(log_softmax(scalar_tensor(3.0, kFloat64), 0).item(), 0.0);
}

TEST(SoftmaxValues, LargeLogitsStayFinite) {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = make({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3}, dt);
    std::vector<double> small = softmax_rows_ref({0, 1, 2, 0, -1, -2}, 2, 3, false);
    std::vector<double> small_log = softmax_rows_ref({0, 1, 2, 0, -1, -2}, 2, 3, true);
    for (double y : values(softmax(x, 1))) EXPECT_TRUE(std::isfinite(y));
    for (double y : values(log_softmax(x, 1))) EXPECT_TRUE(std::isfinite(y));
    expect_values(softmax(x, 1), small, 1e-6, 1e-7, "softmax large");
    expect_values(log_softmax(x, 1), small_log, 1e-4, 1e-4, "log_softmax large (loose)");
    expect_values(softmax(x.t(), 0), transpose_ref(small, 2, 3), 1e-6, 1e-7, "softmax large dim 0");
    EXPECT_TRUE(std::isfinite(cross_entropy(x, make_i64({2, 0})).item()));
  }
  Tensor huge = make({1e30, 0.0}, {2}, kFloat32);
  expect_values(softmax(huge, 0), {1.0, 0.0});
}

// log_softmax(x) = (x - max) - log(sum exp(x - max)) keeps float32 precision for large logits;
// computing x - (max + log(sum)) first rounds max + log(sum) at the magnitude of the logits
// (ulp(1002) ~ 6e-5 in float32). The same holds for cross_entropy's lse - z_t.
TEST(SoftmaxValues, LargeLogitsKeepFloat32Precision) {
  Tensor x = make({1000, 1001, 1002}, {1, 3}, kFloat32);
  std::vector<double> want = softmax_rows_ref({0, 1, 2}, 1, 3, true);  // -2.4076, -1.4076, -0.4076
  expect_values(log_softmax(x, 1), want, 2e-6, 1e-6, "log_softmax f32 logits ~1000");
  expect_values(cross_entropy(x, make_i64({2})), {-want[2]}, 2e-6, 1e-6, "cross_entropy f32 logits ~1000");
}

TEST(LossValues, CrossEntropyReductions) {
  const int64_t N = 6, C = 5;
  for (DType dt : {kFloat64, kFloat32}) {
    double rt = dt == kFloat32 ? 2e-6 : 1e-12;
    std::vector<double> z = data_for(dt, N * C, 81, -3, 3);
    std::vector<int64_t> t = {0, 4, 2, 2, 1, 3};
    Tensor logits = make(z, {N, C}, dt), target = make_i64(t);
    std::vector<double> rows = cross_entropy_rows_ref(z, N, C, t, -100, 0.0);
    double total = 0;
    for (double r : rows) total += r;
    CrossEntropyOptions none, summed;
    none.reduction = Reduction::None;
    summed.reduction = Reduction::Sum;
    Tensor l_none = cross_entropy(logits, target, none);
    EXPECT_EQ(l_none.sizes(), (Shape{N}));
    EXPECT_EQ(l_none.dtype(), dt);
    expect_values(l_none, rows, rt, 1e-6, "ce none");
    expect_values(cross_entropy(logits, target, summed), {total}, rt, 1e-6, "ce sum");
    Tensor l_mean = cross_entropy(logits, target);
    EXPECT_EQ(l_mean.dim(), 0);
    expect_values(l_mean, {total / N}, rt, 1e-6, "ce mean");
    // int32 targets give the same.
    std::vector<int32_t> t32(t.begin(), t.end());
    expect_values(cross_entropy(logits, make_i32(t32)), {total / N}, rt, 1e-6, "ce int32 targets");
  }
  // Known value: uniform logits give log(C).
  EXPECT_NEAR(cross_entropy(zeros({2, 4}, kFloat64), make_i64({1, 3})).item(), std::log(4.0), 1e-12);
}

TEST(LossValues, CrossEntropyIgnoreIndexAndSmoothing) {
  const int64_t N = 5, C = 4;
  std::vector<double> z = uniform_values(N * C, 82, -2, 2);
  Tensor logits = make(z, {N, C});
  std::vector<int64_t> t = {1, -100, 3, -100, 0};
  std::vector<double> rows = cross_entropy_rows_ref(z, N, C, t, -100, 0.0);
  double total = 0;
  for (double r : rows) total += r;
  CrossEntropyOptions o;
  expect_values(cross_entropy(logits, make_i64(t), o), {total / 3.0}, 1e-12, 1e-12, "ignore default, mean over 3");
  o.reduction = Reduction::None;
  expect_values(cross_entropy(logits, make_i64(t), o), rows, 1e-12, 1e-12, "ignore none");
  // A custom ignore_index that is also a valid class.
  std::vector<int64_t> t2 = {2, 2, 3, 1, 0};
  CrossEntropyOptions o2;
  o2.ignore_index = 2;
  std::vector<double> rows2 = cross_entropy_rows_ref(z, N, C, t2, 2, 0.0);
  double total2 = 0;
  for (double r : rows2) total2 += r;
  expect_values(cross_entropy(logits, make_i64(t2), o2), {total2 / 3.0}, 1e-12, 1e-12, "ignore_index 2");
  o2.reduction = Reduction::Sum;
  expect_values(cross_entropy(logits, make_i64(t2), o2), {total2}, 1e-12, 1e-12, "ignore_index 2 sum");
  // Label smoothing 0.1.
  CrossEntropyOptions s;
  s.label_smoothing = 0.1;
  std::vector<int64_t> t3 = {1, 0, 3, 2, 0};
  std::vector<double> rows3 = cross_entropy_rows_ref(z, N, C, t3, -100, 0.1);
  double total3 = 0;
  for (double r : rows3) total3 += r;
  expect_values(cross_entropy(logits, make_i64(t3), s), {total3 / N}, 1e-12, 1e-12, "smoothing 0.1 mean");
  s.reduction = Reduction::None;
  expect_values(cross_entropy(logits, make_i64(t3), s), rows3, 1e-12, 1e-12, "smoothing 0.1 none");
  // Smoothing together with ignored rows.
  CrossEntropyOptions si;
  si.label_smoothing = 0.1;
  std::vector<double> rows4 = cross_entropy_rows_ref(z, N, C, t, -100, 0.1);
  double total4 = 0;
  for (double r : rows4) total4 += r;
  expect_values(cross_entropy(logits, make_i64(t), si), {total4 / 3.0}, 1e-12, 1e-12, "smoothing + ignore");
  // Everything ignored: mean is 0/0 = NaN.
  EXPECT_TRUE(std::isnan(cross_entropy(logits, full({N}, -100, kInt64)).item()));
}

TEST(LossValues, CrossEntropyUnbatched) {
  std::vector<double> z = {0.5, -1.0, 2.0, 0.0};
  Tensor logits = make(z, {4});
  Tensor target = scalar_tensor(2, kInt64);
  std::vector<double> rows = cross_entropy_rows_ref(z, 1, 4, {2}, -100, 0.0);
  Tensor l = cross_entropy(logits, target);
  EXPECT_EQ(l.dim(), 0);
  EXPECT_NEAR(l.item(), rows[0], 1e-12);
  CrossEntropyOptions none;
  none.reduction = Reduction::None;
  Tensor ln = cross_entropy(logits, target, none);
  EXPECT_EQ(ln.dim(), 0);
  EXPECT_NEAR(ln.item(), rows[0], 1e-12);
}

TEST(LossValues, NllAndMse) {
  const int64_t N = 4, C = 3;
  std::vector<double> z = uniform_values(N * C, 83, -2, 2);
  std::vector<double> logp = softmax_rows_ref(z, N, C, true);
  Tensor lp = make(logp, {N, C});
  std::vector<int64_t> t = {2, 0, -100, 1};
  std::vector<double> rows;
  for (int64_t r = 0; r < N; ++r) rows.push_back(t[r] == -100 ? 0.0 : -logp[r * C + t[r]]);
  CrossEntropyOptions none, summed;
  none.reduction = Reduction::None;
  summed.reduction = Reduction::Sum;
  expect_values(nll_loss(lp, make_i64(t), none), rows, 1e-12, 1e-12, "nll none");
  expect_values(nll_loss(lp, make_i64(t), summed), {rows[0] + rows[1] + rows[3]}, 1e-12, 1e-12, "nll sum");
  expect_values(nll_loss(lp, make_i64(t)), {(rows[0] + rows[1] + rows[3]) / 3.0}, 1e-12, 1e-12, "nll mean");
  std::vector<int32_t> t32 = {2, 0, 1, 1};
  expect_values(nll_loss(lp, make_i32(t32), none), {-logp[2], -logp[3], -logp[7], -logp[10]}, 1e-12, 1e-12,
                "nll int32");
  // nll_loss(log_softmax) == cross_entropy
  std::vector<int64_t> tv = {2, 0, 1, 1};
  EXPECT_NEAR(nll_loss(log_softmax(make(z, {N, C}), 1), make_i64(tv)).item(),
              cross_entropy(make(z, {N, C}), make_i64(tv)).item(), 1e-12);

  std::vector<double> a = uniform_values(6, 84), b = uniform_values(6, 85);
  std::vector<double> sq;
  double s = 0;
  for (int i = 0; i < 6; ++i) {
    sq.push_back((a[i] - b[i]) * (a[i] - b[i]));
    s += sq.back();
  }
  expect_values(mse_loss(make(a, {2, 3}), make(b, {2, 3}), Reduction::None), sq);
  expect_values(mse_loss(make(a, {2, 3}), make(b, {2, 3}), Reduction::Sum), {s});
  expect_values(mse_loss(make(a, {2, 3}), make(b, {2, 3})), {s / 6});
  Tensor mf = mse_loss(make(a, {2, 3}, kFloat32), make(b, {2, 3}, kFloat32));
  EXPECT_EQ(mf.dtype(), kFloat32);
  EXPECT_NEAR(mf.item(), s / 6, 1e-6);
}

}  // namespace
}  // namespace tapegrad
