// Non-contiguous inputs against their contiguous copies, and large tensors (the OpenMP paths)
// against serial loops.
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
#include "support/thread_count.h"

namespace tapegrad {
namespace {

using namespace reference;

// ---------------------------------------------------------------------------------------------
// Non-contiguous inputs give the same values as their contiguous copies
// ---------------------------------------------------------------------------------------------

struct Layout {
  std::string name;
  Tensor x;
};

// Several non-contiguous 2-D tensors over random data.
std::vector<Layout> noncontiguous_2d() {
  std::vector<Layout> out;
  out.push_back({"transposed", make(uniform_values(24, 101, 0.1, 2.0), {4, 6}).t()});                      // [6, 4]
  out.push_back({"sliced with step", make(uniform_values(48, 102, 0.1, 2.0), {6, 8}).slice(1, 1, 8, 2)});  // [6, 4]
  out.push_back({"expanded", make(uniform_values(4, 103, 0.1, 2.0), {4}).expand({6, 4})});
  out.push_back({"narrowed", make(uniform_values(80, 104, 0.1, 2.0), {8, 10}).narrow(0, 1, 6).narrow(1, 3, 4)});
  out.push_back({"stepped rows", make(uniform_values(64, 105, 0.1, 2.0), {16, 4})
                                     .slice(0, 1, 16, 3)
                                     .narrow(0, 0, 5)
                                     .unsqueeze(0)
                                     .expand({1, 5, 4})
                                     .reshape({5, 4})});
  out.push_back(
      {"permuted", make(uniform_values(24, 106, 0.1, 2.0), {2, 4, 3}).permute({2, 1, 0}).reshape({3, 8}).t()});
  return out;
}

TEST(NonContiguousValues, OpsMatchContiguousCopies) {
  for (const Layout& l : noncontiguous_2d()) {
    const Tensor& x = l.x;
    Tensor xc = x.contiguous();
    ASSERT_EQ(values(x), values(xc)) << l.name;
    std::vector<double> v = values(xc);
    const int64_t R = x.size(0), C = x.size(1);
    auto same = [&](const Tensor& a, const Tensor& b, const std::string& op) {
      ASSERT_EQ(a.sizes(), b.sizes()) << l.name << " " << op;
      expect_values(a, values(b), 1e-13, 1e-13, l.name + " " + op);
    };
    same(exp(x), exp(xc), "exp");
    same(gelu(x), gelu(xc), "gelu");
    same(tanh(x), tanh(xc), "tanh");
    same(neg(x), neg(xc), "neg");
    same(log(x), log(xc), "log");
    same(x + xc, xc * 2.0, "add self copy");
    same(x * make({1, 2, 3, 4}, {4}).slice(0, 0, C), xc * make({1, 2, 3, 4}, {4}).slice(0, 0, C), "mul broadcast");
    same(x - x.select(0, 0), xc - xc.select(0, 0), "sub row");
    same(div(x, x.t().t()), div(xc, xc), "div");
    same(pow(x, 1.5), pow(xc, 1.5), "pow scalar");
    same(maximum(x, 1.0), maximum(xc, 1.0), "maximum");
    same(gt(x, 1.0), gt(xc, 1.0), "gt");
    same(where(gt(x, 1.0), x, -x), where(gt(xc, 1.0), xc, -xc), "where");
    same(clamp(x, 0.5, 1.5), clamp(xc, 0.5, 1.5), "clamp");
    same(sum(x), sum(xc), "sum all");
    same(sum(x, {0}), sum(xc, {0}), "sum 0");
    same(sum(x, {1}, true), sum(xc, {1}, true), "sum 1");
    same(mean(x, {0}), mean(xc, {0}), "mean 0");
    same(var(x, Shape{1}), var(xc, Shape{1}), "var 1");
    same(max(x, 0).values, max(xc, 0).values, "max 0");
    same(max(x, 0).indices, max(xc, 0).indices, "max 0 idx");
    same(argmin(x, 1), argmin(xc, 1), "argmin 1");
    same(max(x), max(xc), "max all");
    same(softmax(x, 1), softmax(xc, 1), "softmax 1");
    same(log_softmax(x, 0), log_softmax(xc, 0), "log_softmax 0");
    same(x.to(kFloat32), xc.to(kFloat32), "to f32");
    same(x.clone(), xc, "clone");
    same(x.reshape({-1}), xc.reshape({-1}), "reshape");
    same(cat({x, xc, x}, 0), cat({xc, xc, xc}, 0), "cat 0");
    same(cat({x, x}, 1), cat({xc, xc}, 1), "cat 1");
    same(index_select(x, 0, make_i64({R - 1, 0})), index_select(xc, 0, make_i64({R - 1, 0})), "index_select");
    same(index_select(x, 1, make_i64({C - 1, 0})), index_select(xc, 1, make_i64({C - 1, 0})), "index_select 1");
    Tensor gidx = zeros({R, 2}, kInt64);
    same(gather(x, 1, gidx), gather(xc, 1, gidx), "gather");
    same(scatter_add(x, 0, zeros({1, C}, kInt64), x.narrow(0, 0, 1)),
         scatter_add(xc, 0, zeros({1, C}, kInt64), xc.narrow(0, 0, 1)), "scatter_add");
    same(index_add(x, 0, make_i64({0}), x.narrow(0, 1, 1)), index_add(xc, 0, make_i64({0}), xc.narrow(0, 1, 1)),
         "index_add");
    Tensor w = make(uniform_values(static_cast<size_t>(C * 3), 107), {C, 3});
    same(mm(x, w), mm(xc, w), "mm lhs");
    same(mm(x.t(), x), mm(xc.t(), xc), "mm gram");
    same(matmul(w.t(), x.t()), matmul(w.t(), xc.t()), "matmul rhs");
    same(linear(x, w.t(), make({1, 2, 3}, {3})), linear(xc, w.t(), make({1, 2, 3}, {3})), "linear");
    // And against a hand loop for the row sums and the matrix product.
    std::vector<double> rs(R, 0.0);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) rs[i] += v[i * C + j];
    expect_values(sum(x, {1}), rs, 1e-13, 1e-13, l.name + " row sums vs loop");
    expect_values(mm(x, w), matmul_ref(v, values(w), R, C, 3), 1e-12, 1e-12, l.name + " mm vs loop");
    expect_values(softmax(x, 1), softmax_rows_ref(v, R, C, false), 1e-12, 1e-14, l.name + " softmax vs loop");
    // Contiguous results are contiguous.
    EXPECT_TRUE(exp(x).is_contiguous()) << l.name;
    EXPECT_TRUE((x + 1.0).is_contiguous()) << l.name;
  }
}

// A transposed matrix made contiguous goes through blocked transposes (four-byte elements in
// 8 x 8 register blocks): every edge of the blocks and tiles, each element size, a source that is
// a narrowed view, and a destination whose rows are wider than the matrix.
TEST(NonContiguousValues, TransposedCopiesAtEveryBlockEdge) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{8, 8},   {9, 17},  {16, 7},   {32, 512},
                                                           {37, 45}, {64, 64}, {100, 70}, {65, 129}};
  for (DType dtype : {kFloat32, kInt32, kFloat64, kBFloat16}) {
    for (auto [rows, cols] : shapes) {
      // src [cols + 3, rows + 5] narrowed to [cols, rows]; its transpose is [rows, cols].
      Tensor base =
          make(uniform_values(static_cast<size_t>((cols + 3) * (rows + 5)), 107, -100, 100), {cols + 3, rows + 5})
              .to(dtype);
      Tensor src = base.narrow(0, 2, cols).narrow(1, 1, rows).t();
      const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
      ASSERT_EQ(values(src.contiguous()), values(src)) << what;
      Tensor wide = zeros({rows, cols + 6}, TensorOptions(dtype));
      Tensor dst = wide.narrow(1, 3, cols);
      dst.copy_(src);
      ASSERT_EQ(values(dst), values(src)) << what << " into rows of " << cols + 6;
      for (int64_t i = 0; i < rows; ++i)  // the columns around dst untouched
        for (int64_t j : {int64_t{0}, int64_t{1}, int64_t{2}, cols + 3, cols + 5})
          ASSERT_EQ(wide.select(0, i).select(0, j).item(), 0.0) << what << " wrote outside at " << i << ", " << j;
    }
  }
}

TEST(NonContiguousValues, InplaceOnNonContiguousTargets) {
  for (const char* name : {"transposed", "sliced with step", "narrowed"}) {
    std::vector<Layout> ls = noncontiguous_2d();
    Tensor x;
    for (Layout& l : ls)
      if (l.name == name) x = l.x;
    ASSERT_TRUE(x.defined());
    std::vector<double> before = values(x);
    x.mul_(2.0);
    x.add_(make({1, 2, 3, 4}, {4}));
    std::vector<double> want = before;
    for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] * 2.0 + static_cast<double>(i % 4 + 1);
    expect_values(x, want, 1e-14, 1e-14, name);
    x.clamp_(1.0, 3.0);
    for (double& w : want) w = std::min(3.0, std::max(1.0, w));
    expect_values(x, want, 1e-14, 1e-14, name);
  }
}

// ---------------------------------------------------------------------------------------------
// Large tensors: the OpenMP paths against serial loops
// ---------------------------------------------------------------------------------------------

TEST(LargeValues, PointwiseOpsOnAMillionElements) {
  testing::ThreadCount threads(testing::at_least_threads(4));
  const int64_t n = int64_t{1} << 20;
  std::vector<double> v = round_f32(uniform_values(static_cast<size_t>(n), 111, -4, 4));
  std::vector<double> w = round_f32(uniform_values(static_cast<size_t>(n), 112, 0.5, 2));
  Tensor x = make(v, {1024, 1024}, kFloat32), y = make(w, {1024, 1024}, kFloat32);
  expect_values(exp(x), map_ref(v, [](double a) { return std::exp(a); }), 3e-6, 0, "exp large");
  expect_values(gelu(x), map_ref(v, [](double a) { return a * 0.5 * std::erfc(-a / std::sqrt(2.0)); }), 3e-6, 1e-6,
                "gelu large");
  expect_values(relu(x), map_ref(v, [](double a) { return a > 0 ? a : 0.0; }), 0, 0, "relu large");
  std::vector<double> sumv(v.size()), quot(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    sumv[i] = static_cast<double>(static_cast<float>(v[i]) + static_cast<float>(w[i]));
    quot[i] = static_cast<double>(static_cast<float>(v[i]) / static_cast<float>(w[i]));
  }
  expect_values(x + y, sumv, 0, 0, "add large");
  expect_values(x / y, quot, 0, 0, "div large");
  // Broadcast a row over the million elements.
  std::vector<double> row = round_f32(uniform_values(1024, 113));
  std::vector<double> prod(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    prod[i] = static_cast<double>(static_cast<float>(v[i]) * static_cast<float>(row[i % 1024]));
  expect_values(x * make(row, {1024}, kFloat32), prod, 0, 0, "mul broadcast row large");
  // A transposed operand.
  std::vector<double> tsum(v.size());
  for (int64_t i = 0; i < 1024; ++i)
    for (int64_t j = 0; j < 1024; ++j)
      tsum[i * 1024 + j] =
          static_cast<double>(static_cast<float>(v[i * 1024 + j]) + static_cast<float>(w[j * 1024 + i]));
  expect_values(x + y.t(), tsum, 0, 0, "add transposed large");
  // Comparisons, where, clamp, conversions.
  std::vector<double> gtv = map_ref(v, [](double a) { return a > 0.5 ? 1.0 : 0.0; });
  expect_values(gt(x, 0.5), gtv, 0, 0, "gt large");
  expect_values(where(gt(x, 0.5), x, 0.0), map_ref(v, [](double a) { return a > 0.5 ? a : 0.0; }), 0, 0, "where large");
  expect_values(clamp(x, -1.0, 1.0), map_ref(v, [](double a) { return std::min(1.0, std::max(-1.0, a)); }), 0, 0,
                "clamp large");
  expect_values(x.to(kFloat64), v, 0, 0, "to f64 large");
  expect_values(x.t().contiguous().t(), v, 0, 0, "transposed copy large");
  // In place.
  Tensor z = x.clone();
  z.mul_(2.0);
  expect_values(z, map_ref(v, [](double a) { return 2 * a; }), 0, 0, "mul_ large");
  // Integers.
  Tensor idx = arange(static_cast<double>(n));
  std::vector<int64_t> got = (idx * 3 - 7).tolist<int64_t>();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && got[static_cast<size_t>(i)] == 3 * i - 7;
  EXPECT_TRUE(ok) << "int arithmetic on arange(1<<20)";
}

TEST(LargeValues, ReductionsRowColumnAndLongRow) {
  testing::ThreadCount threads(testing::at_least_threads(4));
  const int64_t N = 2048, M = 700;  // M not a multiple of the 256-wide column strips
  std::vector<double> v = uniform_values(static_cast<size_t>(N * M), 121, -1, 1);
  Tensor x = make(v, {N, M});
  expect_values(sum(x, {0}), sum_ref(v, {N, M}, {0}), 1e-10, 1e-10, "sum dim 0 (columns)");
  expect_values(sum(x, {1}), sum_ref(v, {N, M}, {1}), 1e-10, 1e-10, "sum dim 1 (rows)");
  expect_values(mean(x, {0}), mean_ref(v, {N, M}, {0}), 1e-10, 1e-12, "mean dim 0");
  expect_values(mean(x, {1}), mean_ref(v, {N, M}, {1}), 1e-10, 1e-12, "mean dim 1");
  expect_values(sum(x), sum_ref(v, {N, M}, {}), 1e-10, 1e-9, "sum all");
  expect_values(var(x, Shape{0}), var_ref(v, {N, M}, {0}, 1.0), 1e-10, 1e-12, "var dim 0");
  std::vector<double> mv, mi;
  extreme_ref(v, {N, M}, 0, true, mv, mi);
  ValuesIndices m0 = max(x, 0);
  expect_values(m0.values, mv, 0, 0, "max dim 0");
  expect_values(m0.indices, mi, 0, 0, "max dim 0 idx");
  extreme_ref(v, {N, M}, 1, false, mv, mi);
  ValuesIndices m1 = min(x, 1);
  expect_values(m1.values, mv, 0, 0, "min dim 1");
  expect_values(m1.indices, mi, 0, 0, "min dim 1 idx");
  EXPECT_EQ(max(x).item(), *std::max_element(v.begin(), v.end()));
  // f32 column and row sums (accumulated in f64).
  std::vector<double> vf = round_f32(v);
  Tensor xf = make(vf, {N, M}, kFloat32);
  expect_values(sum(xf, {0}), sum_ref(vf, {N, M}, {0}), 1e-6, 1e-6, "f32 sum dim 0");
  expect_values(sum(xf, {1}), sum_ref(vf, {N, M}, {1}), 1e-6, 1e-6, "f32 sum dim 1");
  // Transposed input: the column path of the transpose is the row path of the original.
  expect_values(sum(x.t(), {1}), sum_ref(v, {N, M}, {0}), 1e-10, 1e-10, "sum of transpose");
  // Middle dim with outer > 1: [4, 1000, 300] over dim 1.
  std::vector<double> v3 = uniform_values(4 * 1000 * 300, 122);
  Tensor x3 = make(v3, {4, 1000, 300});
  expect_values(sum(x3, {1}), sum_ref(v3, {4, 1000, 300}, {1}), 1e-10, 1e-10, "sum middle dim");
  expect_values(sum(x3, {0, 2}), sum_ref(v3, {4, 1000, 300}, {0, 2}), 1e-10, 1e-10, "sum dims 0,2");
  extreme_ref(v3, {4, 1000, 300}, 1, true, mv, mi);
  expect_values(argmax(x3, 1), mi, 0, 0, "argmax middle dim");
}

TEST(LargeValues, LongSingleRowSums) {
  testing::ThreadCount threads(testing::at_least_threads(4));
  const int64_t L = 300001;  // > 65536, not a multiple of the block
  std::vector<double> v = uniform_values(static_cast<size_t>(L), 131, 0, 1);
  double total = 0;
  for (double a : v) total += a;
  Tensor row = make(v, {1, L});
  EXPECT_NEAR(sum(row, {1}).item(), total, total * 1e-12);  // summation order differs from the loop
  EXPECT_NEAR(sum(row).item(), total, total * 1e-12);
  EXPECT_NEAR(mean(row, {1}).item(), total / L, 1e-12);
  EXPECT_NEAR(mean(make(v, {L})).item(), total / L, 1e-12);
  std::vector<double> vf = round_f32(v);
  double totalf = 0;
  for (double a : vf) totalf += a;
  EXPECT_NEAR(sum(make(vf, {L}, kFloat32)).item(), totalf, totalf * 1e-6);
  // Integers, exactly.
  std::vector<int64_t> iv(static_cast<size_t>(L));
  int64_t itotal = 0;
  for (int64_t i = 0; i < L; ++i) {
    iv[static_cast<size_t>(i)] = (i * 7919) % 1000 - 500;
    itotal += iv[static_cast<size_t>(i)];
  }
  EXPECT_EQ(sum(make_i64(iv)).item<int64_t>(), itotal);
  std::vector<int32_t> iv32(iv.begin(), iv.end());
  EXPECT_EQ(sum(make_i32(iv32, {1, L}), {1}).item<int64_t>(), itotal);
  // max along the long row.
  std::vector<double> mv, mi;
  extreme_ref(v, {1, L}, 1, true, mv, mi);
  ValuesIndices m = max(row, 1);
  EXPECT_EQ(m.values.item(), mv[0]);
  EXPECT_EQ(m.indices.item<int64_t>(), static_cast<int64_t>(mi[0]));
}

TEST(LargeValues, SoftmaxCrossEntropyIndexingMatmul) {
  testing::ThreadCount threads(testing::at_least_threads(4));
  const int64_t R = 8192, C = 10;
  std::vector<double> z = uniform_values(static_cast<size_t>(R * C), 141, -5, 5);
  Tensor logits = make(z, {R, C});
  expect_values(softmax(logits, 1), softmax_rows_ref(z, R, C, false), 1e-12, 1e-14, "softmax many rows");
  expect_values(log_softmax(logits, 1), softmax_rows_ref(z, R, C, true), 1e-12, 1e-12, "log_softmax many rows");
  std::vector<int64_t> t(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) t[static_cast<size_t>(i)] = (i * 31) % C;
  std::vector<double> rows = cross_entropy_rows_ref(z, R, C, t, -100, 0.0);
  double total = 0;
  for (double r : rows) total += r;
  CrossEntropyOptions none;
  none.reduction = Reduction::None;
  expect_values(cross_entropy(logits, make_i64(t), none), rows, 1e-12, 1e-12, "ce many rows");
  EXPECT_NEAR(cross_entropy(logits, make_i64(t)).item(), total / R, 1e-12);
  // index_select / gather over many rows.
  std::vector<int64_t> pick(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) pick[static_cast<size_t>(i)] = (i * 17 + 3) % R;
  std::vector<double> want;
  for (int64_t i = 0; i < R; ++i) {
    int64_t p = pick[static_cast<size_t>(i)];
    want.insert(want.end(), z.begin() + p * C, z.begin() + (p + 1) * C);
  }
  expect_values(index_select(logits, 0, make_i64(pick)), want, 0, 0, "index_select many rows");
  std::vector<double> gathered;
  for (int64_t i = 0; i < R; ++i) gathered.push_back(z[static_cast<size_t>(i * C + t[static_cast<size_t>(i)])]);
  expect_values(gather(logits, 1, make_i64(t, {R, 1})), gathered, 0, 0, "gather many rows");
  // A large GEMM (OpenBLAS threads) with a transposed operand.
  const int64_t n = 96, k = 130, m = 70;
  std::vector<double> a = uniform_values(n * k, 142), bt = uniform_values(m * k, 143);
  expect_values(mm(make(a, {n, k}), make(bt, {m, k}).t()), matmul_ref(a, transpose_ref(bt, m, k), n, k, m), 1e-12,
                1e-12, "large mm");
}

// Generic row-major reference for a permuted view: value at logical index of x.permute(order).
std::vector<double> permute_ref(const std::vector<double>& v, const Shape& shape, const Shape& order) {
  Shape out_shape;
  for (int64_t d : order) out_shape.push_back(shape[static_cast<size_t>(d)]);
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * shape[d + 1];
  std::vector<double> r;
  for (int64_t i = 0; i < numel_of(out_shape); ++i) {
    std::vector<int64_t> idx = unravel(i, out_shape);
    int64_t src = 0;
    for (size_t k = 0; k < order.size(); ++k) src += idx[k] * strides[static_cast<size_t>(order[k])];
    r.push_back(v[static_cast<size_t>(src)]);
  }
  return r;
}

TEST(LargeValues, PermutedFourDimTensorsWithBroadcasting) {
  testing::ThreadCount threads(testing::at_least_threads(4));
  const Shape shape = {6, 50, 40, 30};  // 360000 elements, several parallel chunks
  const Shape order = {2, 0, 3, 1};     // -> [40, 6, 30, 50]
  std::vector<double> v = uniform_values(static_cast<size_t>(numel_of(shape)), 151, -2, 2);
  Tensor x = make(v, shape).permute(order);
  std::vector<double> xv = permute_ref(v, shape, order);
  const Shape ps = {40, 6, 30, 50};
  ASSERT_EQ(x.sizes(), ps);
  expect_values(x.contiguous(), xv, 0, 0, "permuted copy");
  expect_values(exp(x), map_ref(xv, [](double a) { return std::exp(a); }), 1e-14, 0, "exp permuted");
  // Broadcast operands: [6, 1, 50] and [30, 1].
  std::vector<double> b1 = uniform_values(300, 152), b2 = uniform_values(30, 153);
  Tensor r = x * make(b1, {6, 1, 50}) + make(b2, {30, 1});
  std::vector<double> e1 = broadcast_to_ref(b1, {6, 1, 50}, ps), e2 = broadcast_to_ref(b2, {30, 1}, ps);
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] * e1[i] + e2[i];
  expect_values(r, want, 1e-14, 1e-14, "permuted * broadcast + broadcast");
  // where with all three operands broadcast / permuted.
  Tensor w = where(gt(make(b2, {30, 1}), 0.0), x, make(b1, {6, 1, 50}));
  std::vector<double> ww(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) ww[i] = e2[i] > 0 ? xv[i] : e1[i];
  expect_values(w, ww, 0, 0, "where permuted");
  // Reductions over non-adjacent dims of the permuted view.
  expect_values(sum(x, {0, 2}), sum_ref(xv, ps, {0, 2}), 1e-12, 1e-12, "sum permuted {0,2}");
  expect_values(sum(x, {1, 3}, true), sum_ref(xv, ps, {1, 3}), 1e-12, 1e-12, "sum permuted {1,3}");
  expect_values(mean(x, {3}), mean_ref(xv, ps, {3}), 1e-12, 1e-12, "mean permuted last");
  std::vector<double> mv, mi;
  extreme_ref(xv, ps, 1, true, mv, mi);
  ValuesIndices m = max(x, 1);
  expect_values(m.values, mv, 0, 0, "max permuted dim 1");
  expect_values(m.indices, mi, 0, 0, "max permuted dim 1 idx");
  // softmax along a middle dim of the permuted view.
  Tensor sm = softmax(x, 2);
  std::vector<double> rows = permute_ref(xv, ps, {0, 1, 3, 2});  // [40, 6, 50, 30]
  std::vector<double> srows = softmax_rows_ref(rows, 40 * 6 * 50, 30, false);
  expect_values(sm.permute({0, 1, 3, 2}), srows, 1e-12, 1e-14, "softmax permuted dim 2");
  // Conversion of the permuted view.
  expect_values(x.to(kFloat32), round_f32(xv), 0, 0, "to f32 permuted");
  // In place through the permuted view reaches the base in the right places.
  Tensor base = make(v, shape);
  base.permute(order).mul_(make(b2, {30, 1}));
  std::vector<double> bw = v;
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    std::vector<int64_t> idx = unravel(i, shape);  // [6, 50, 40, 30]: the [30, 1] factor follows dim 3
    bw[static_cast<size_t>(i)] *= b2[static_cast<size_t>(idx[3])];
  }
  expect_values(base, bw, 1e-15, 0, "mul_ through permuted view");
}

TEST(LargeValues, CatSplitIndexAddAndScatterOnBigTensors) {
  testing::ThreadCount threads(testing::at_least_threads(4));
  const int64_t R = 300, C1 = 700, C2 = 1300;
  std::vector<double> a = uniform_values(R * C1, 161), b = uniform_values(R * C2, 162);
  Tensor ta = make(a, {R, C1}), tb = make(b, {R, C2});
  Tensor c = cat({ta, tb.to(kFloat32), ta}, 1);
  ASSERT_EQ(c.sizes(), (Shape{R, 2 * C1 + C2}));
  EXPECT_EQ(c.dtype(), kFloat64);
  std::vector<double> want;
  std::vector<double> bf = round_f32(b);
  for (int64_t r = 0; r < R; ++r) {
    want.insert(want.end(), a.begin() + r * C1, a.begin() + (r + 1) * C1);
    want.insert(want.end(), bf.begin() + r * C2, bf.begin() + (r + 1) * C2);
    want.insert(want.end(), a.begin() + r * C1, a.begin() + (r + 1) * C1);
  }
  expect_values(c, want, 0, 0, "cat dim 1 big");
  std::vector<Tensor> parts = split(c, std::vector<int64_t>{C1, C2, C1}, 1);
  expect_values(parts[0], a, 0, 0, "split part 0");
  expect_values(parts[1], bf, 0, 0, "split part 1");
  // index_add along dim 0 with rows wider than one 1024-wide strip, duplicates included.
  const int64_t K = 50;
  std::vector<int64_t> idx(K);
  for (int64_t k = 0; k < K; ++k) idx[static_cast<size_t>(k)] = (k * 7) % 20;
  std::vector<double> src = uniform_values(K * C2, 163);
  Tensor ia = index_add(tb, 0, make_i64(idx), make(src, {K, C2}));
  std::vector<double> wa = b;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < C2; ++j) wa[idx[k] * C2 + j] += src[k * C2 + j];
  expect_values(ia, wa, 1e-15, 1e-15, "index_add dim 0 wide rows");
  // index_add along dim 1 (parallel over rows).
  std::vector<int64_t> idx1(K);
  for (int64_t k = 0; k < K; ++k) idx1[static_cast<size_t>(k)] = (k * 13) % 30;
  std::vector<double> src1 = uniform_values(R * K, 164);
  Tensor ib = index_add(ta, 1, make_i64(idx1), make(src1, {R, K}));
  std::vector<double> wb = a;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) wb[r * C1 + idx1[k]] += src1[r * K + k];
  expect_values(ib, wb, 1e-15, 1e-15, "index_add dim 1");
  // scatter_add / gather along dim 0 with a big index.
  std::vector<int64_t> sidx(static_cast<size_t>(R * C1));
  for (int64_t i = 0; i < R * C1; ++i) sidx[static_cast<size_t>(i)] = (i * 31 + i / C1) % 10;
  Tensor sc = scatter_add(zeros({10, C1}, kFloat64), 0, make_i64(sidx, {R, C1}), ta);
  std::vector<double> ws(10 * C1, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < C1; ++j) ws[sidx[r * C1 + j] * C1 + j] += a[r * C1 + j];
  expect_values(sc, ws, 1e-12, 1e-12, "scatter_add big");
  Tensor g = gather(ta.narrow(0, 0, 10), 0, make_i64(sidx, {R, C1}));
  std::vector<double> wg(static_cast<size_t>(R * C1));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < C1; ++j) wg[r * C1 + j] = a[sidx[r * C1 + j] * C1 + j];
  expect_values(g, wg, 0, 0, "gather big");
}

}  // namespace
}  // namespace tapegrad
