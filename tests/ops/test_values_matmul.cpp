// Forward values of the matrix products (mm, bmm, matmul, addmm, linear) against a triple loop.
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
// Matrix products
// ---------------------------------------------------------------------------------------------

TEST(MatmulValues, MmContiguousF32AndF64) {
  for (DType dt : {kFloat64, kFloat32}) {
    std::vector<double> a = data_for(dt, 12, 31), b = data_for(dt, 20, 32);
    Tensor r = mm(make(a, {3, 4}, dt), make(b, {4, 5}, dt));
    EXPECT_EQ(r.sizes(), (Shape{3, 5}));
    EXPECT_EQ(r.dtype(), dt);
    expect_values(r, matmul_ref(a, b, 3, 4, 5), dt == kFloat32 ? 1e-5 : 1e-12, 1e-6);
  }
}

TEST(MatmulValues, MmTransposedSlicedAndExpandedOperands) {
  const int64_t n = 3, k = 4, m = 5;
  std::vector<double> at = uniform_values(k * n, 33), bt = uniform_values(m * k, 34);
  std::vector<double> a_logical = transpose_ref(at, k, n), b_logical = transpose_ref(bt, m, k);
  Tensor A = make(at, {k, n}).t(), B = make(bt, {m, k}).t();  // [n, k], [k, m] with column-major strides
  Tensor Ac = make(a_logical, {n, k}), Bc = make(b_logical, {k, m});
  std::vector<double> want = matmul_ref(a_logical, b_logical, n, k, m);
  expect_values(mm(A, Bc), want, 1e-12, 1e-12, "a transposed");
  expect_values(mm(Ac, B), want, 1e-12, 1e-12, "b transposed");
  expect_values(mm(A, B), want, 1e-12, 1e-12, "both transposed");

  // Sliced with an offset and a leading stride larger than the width.
  std::vector<double> big_a = uniform_values(6 * 9, 35);
  Tensor As = make(big_a, {6, 9}).narrow(0, 2, n).narrow(1, 3, k);
  std::vector<double> as_ref = submatrix_ref(big_a, 9, 2, n, 1, 3, k, 1);
  // Sliced with a step (not BLAS-compatible: needs a copy).
  std::vector<double> big_b = uniform_values(k * 2 * 11, 36);
  Tensor Bs = make(big_b, {2 * k, 11}).slice(0, 1, 2 * k, 2).slice(1, 0, 2 * m, 2);
  std::vector<double> bs_ref = submatrix_ref(big_b, 11, 1, k, 2, 0, m, 2);
  ASSERT_EQ(Bs.sizes(), (Shape{k, m}));
  expect_values(mm(As, Bs), matmul_ref(as_ref, bs_ref, n, k, m), 1e-12, 1e-12, "sliced");
  expect_values(mm(As, Bc), matmul_ref(as_ref, b_logical, n, k, m), 1e-12, 1e-12, "narrowed a");
  expect_values(mm(Ac, Bs), matmul_ref(a_logical, bs_ref, n, k, m), 1e-12, 1e-12, "stepped b");
  // Transposed slices.
  Tensor Ats = make(big_a, {6, 9}).narrow(1, 1, n).narrow(0, 0, k).t();  // [n, k]
  std::vector<double> ats_ref = transpose_ref(submatrix_ref(big_a, 9, 0, k, 1, 1, n, 1), k, n);
  expect_values(mm(Ats, Bc), matmul_ref(ats_ref, b_logical, n, k, m), 1e-12, 1e-12, "transposed slice");

  // Expanded (stride-0) operands.
  std::vector<double> row = uniform_values(k, 37), col = uniform_values(k, 38);
  Tensor Ae = make(row, {1, k}).expand({n, k});
  std::vector<double> ae_ref;
  for (int64_t i = 0; i < n; ++i) ae_ref.insert(ae_ref.end(), row.begin(), row.end());
  expect_values(mm(Ae, Bc), matmul_ref(ae_ref, b_logical, n, k, m), 1e-12, 1e-12, "expanded a");
  Tensor Be = make(col, {k, 1}).expand({k, m});
  std::vector<double> be_ref;
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < m; ++j) be_ref.push_back(col[static_cast<size_t>(p)]);
  expect_values(mm(Ac, Be), matmul_ref(a_logical, be_ref, n, k, m), 1e-12, 1e-12, "expanded b");
  // A column of a matrix as a [k, 1] operand, a row as [1, k].
  std::vector<double> grid = uniform_values(k * 7, 39);
  Tensor column = make(grid, {k, 7}).narrow(1, 4, 1);
  std::vector<double> column_ref = submatrix_ref(grid, 7, 0, k, 1, 4, 1, 1);
  expect_values(mm(Ac, column), matmul_ref(a_logical, column_ref, n, k, 1), 1e-12, 1e-12, "column operand");
  Tensor column_t = make(grid, {k, 7}).select(1, 2).unsqueeze(0);  // [1, k] with stride 7
  std::vector<double> ct_ref = submatrix_ref(grid, 7, 0, k, 1, 2, 1, 1);
  expect_values(mm(column_t, Bc), matmul_ref(ct_ref, b_logical, 1, k, m), 1e-12, 1e-12, "strided row operand");
}

TEST(MatmulValues, MmEmptyInnerDimIsZero) {
  Tensor r = mm(zeros({2, 0}, kFloat64), zeros({0, 3}, kFloat64));
  EXPECT_EQ(r.sizes(), (Shape{2, 3}));
  expect_values(r, std::vector<double>(6, 0.0));
  Tensor e = mm(zeros({0, 4}, kFloat32), zeros({4, 3}, kFloat32));
  EXPECT_EQ(e.sizes(), (Shape{0, 3}));
}

TEST(MatmulValues, Bmm) {
  const int64_t B = 3, n = 2, k = 4, m = 5;
  std::vector<double> a = uniform_values(B * n * k, 41), b = uniform_values(B * k * m, 42);
  std::vector<double> want;
  for (int64_t i = 0; i < B; ++i)
    want = concat_ref(want, matmul_ref(slice_ref(a, i * n * k, n * k), slice_ref(b, i * k * m, k * m), n, k, m));
  Tensor r = bmm(make(a, {B, n, k}), make(b, {B, k, m}));
  EXPECT_EQ(r.sizes(), (Shape{B, n, m}));
  expect_values(r, want);
  // b stored as [B, m, k] and transposed; a stored as [n, B, k] and permuted.
  std::vector<double> b_stored(b.size()), a_stored(a.size());
  for (int64_t i = 0; i < B; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < m; ++j) b_stored[(i * m + j) * k + p] = b[(i * k + p) * m + j];
  for (int64_t i = 0; i < B; ++i)
    for (int64_t r0 = 0; r0 < n; ++r0)
      for (int64_t p = 0; p < k; ++p) a_stored[(r0 * B + i) * k + p] = a[(i * n + r0) * k + p];
  Tensor bt = make(b_stored, {B, m, k}).transpose(1, 2);
  Tensor ap = make(a_stored, {n, B, k}).permute({1, 0, 2});
  expect_values(bmm(ap, bt), want, 1e-12, 1e-12, "non-contiguous bmm");
  Tensor rf = bmm(make(round_f32(a), {B, n, k}, kFloat32), make(round_f32(b), {B, k, m}, kFloat32));
  expect_values(rf, want, 1e-5, 1e-6, "f32 bmm");
}

TEST(MatmulValues, MatmulOneDimAndBatchedBroadcasting) {
  std::vector<double> v4 = uniform_values(4, 51), w4 = uniform_values(4, 52);
  std::vector<double> m34 = uniform_values(12, 53), m45 = uniform_values(20, 54);
  // 1-D . 1-D -> 0-dim
  Tensor dot = matmul(make(v4, {4}), make(w4, {4}));
  EXPECT_EQ(dot.dim(), 0);
  double d = 0;
  for (int i = 0; i < 4; ++i) d += v4[i] * w4[i];
  EXPECT_NEAR(dot.item(), d, 1e-12);
  // [3,4] @ [4] -> [3]
  Tensor mv = matmul(make(m34, {3, 4}), make(v4, {4}));
  EXPECT_EQ(mv.sizes(), (Shape{3}));
  expect_values(mv, matmul_ref(m34, v4, 3, 4, 1));
  // [4] @ [4,5] -> [5]
  Tensor vm = matmul(make(v4, {4}), make(m45, {4, 5}));
  EXPECT_EQ(vm.sizes(), (Shape{5}));
  expect_values(vm, matmul_ref(v4, m45, 1, 4, 5));
  // [2,3,4] @ [4,5] -> [2,3,5]
  std::vector<double> t234 = uniform_values(24, 55);
  Tensor tm = matmul(make(t234, {2, 3, 4}), make(m45, {4, 5}));
  EXPECT_EQ(tm.sizes(), (Shape{2, 3, 5}));
  expect_values(tm, matmul_ref(t234, m45, 6, 4, 5));
  // [2,3,4] @ [4] -> [2,3]
  Tensor tv = matmul(make(t234, {2, 3, 4}), make(v4, {4}));
  EXPECT_EQ(tv.sizes(), (Shape{2, 3}));
  expect_values(tv, matmul_ref(t234, v4, 6, 4, 1));
  // [4] @ [2,4,5] -> [2,5]
  std::vector<double> t245 = uniform_values(40, 56);
  Tensor vt = matmul(make(v4, {4}), make(t245, {2, 4, 5}));
  EXPECT_EQ(vt.sizes(), (Shape{2, 5}));
  expect_values(vt, concat_ref(matmul_ref(v4, slice_ref(t245, 0, 20), 1, 4, 5),
                               matmul_ref(v4, slice_ref(t245, 20, 20), 1, 4, 5)));
  // [3,4] @ [2,4,5] -> [2,3,5] (the matrix broadcasts over the batch)
  Tensor mt = matmul(make(m34, {3, 4}), make(t245, {2, 4, 5}));
  EXPECT_EQ(mt.sizes(), (Shape{2, 3, 5}));
  expect_values(mt, concat_ref(matmul_ref(m34, slice_ref(t245, 0, 20), 3, 4, 5),
                               matmul_ref(m34, slice_ref(t245, 20, 20), 3, 4, 5)));
  // [2,1,3,4] @ [5,4,2] -> [2,5,3,2]
  std::vector<double> a4 = uniform_values(2 * 3 * 4, 57), b3 = uniform_values(5 * 4 * 2, 58);
  Tensor bb = matmul(make(a4, {2, 1, 3, 4}), make(b3, {5, 4, 2}));
  EXPECT_EQ(bb.sizes(), (Shape{2, 5, 3, 2}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      want = concat_ref(want, matmul_ref(slice_ref(a4, i * 12, 12), slice_ref(b3, j * 8, 8), 3, 4, 2));
  expect_values(bb, want, 1e-12, 1e-12, "batched broadcast");
  // A transposed batch operand through the folded path: [2,3,4] stored as [2,4,3].
  std::vector<double> stored = uniform_values(24, 59);
  Tensor at = make(stored, {2, 4, 3}).transpose(1, 2);
  std::vector<double> at_ref =
      concat_ref(transpose_ref(slice_ref(stored, 0, 12), 4, 3), transpose_ref(slice_ref(stored, 12, 12), 4, 3));
  expect_values(matmul(at, make(m45, {4, 5})), matmul_ref(at_ref, m45, 6, 4, 5), 1e-12, 1e-12, "transposed batch");
  expect_values(make(m34, {3, 4}).matmul(make(m45, {4, 5})), matmul_ref(m34, m45, 3, 4, 5));
}

TEST(MatmulValues, AddmmAndLinear) {
  const int64_t n = 3, k = 4, m = 5;
  std::vector<double> a = uniform_values(n * k, 61), b = uniform_values(k * m, 62);
  std::vector<double> ab = matmul_ref(a, b, n, k, m);
  std::vector<double> bias = uniform_values(m, 63), colb = uniform_values(n, 64), full_in = uniform_values(n * m, 65);
  Tensor A = make(a, {n, k}), Bm = make(b, {k, m});
  std::vector<double> want(n * m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) want[i * m + j] = bias[j] + ab[i * m + j];
  expect_values(addmm(make(bias, {m}), A, Bm), want, 1e-12, 1e-12, "addmm [m] input");
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) want[i * m + j] = 0.5 * colb[i] + 2.0 * ab[i * m + j];
  expect_values(addmm(make(colb, {n, 1}), A, Bm, 0.5, 2.0), want, 1e-12, 1e-12, "addmm [n,1] beta alpha");
  for (int64_t i = 0; i < n * m; ++i) want[i] = -1.0 * full_in[i] + 0.25 * ab[i];
  expect_values(addmm(make(full_in, {n, m}), A, Bm, -1.0, 0.25), want, 1e-12, 1e-12, "addmm full input");
  // beta = 0 ignores the input entirely (even NaN), like PyTorch.
  expect_values(addmm(full({n, m}, kNaN, kFloat64), A, Bm, 0.0, 1.0), ab, 1e-12, 1e-12, "addmm beta 0");
  // Zero-size inner dim: beta * input.
  expect_values(addmm(make(full_in, {n, m}), zeros({n, 0}, kFloat64), zeros({0, m}, kFloat64), 2.0, 1.0),
                map_ref(full_in, [](double x) { return 2 * x; }), 1e-12, 1e-12, "addmm k=0");
  // addmm with a transposed operand.
  expect_values(
      addmm(make(bias, {m}), make(transpose_ref(a, n, k), {k, n}).t(), Bm),
      [&] {
        std::vector<double> w(n * m);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) w[i * m + j] = bias[j] + ab[i * m + j];
        return w;
      }(),
      1e-12, 1e-12, "addmm transposed a");

  // linear: x @ W^T + b
  const int64_t in = 4, out = 3;
  std::vector<double> w = uniform_values(out * in, 66), bvec = uniform_values(out, 67),
                      x = uniform_values(2 * 5 * in, 68);
  std::vector<double> wt = transpose_ref(w, out, in);
  std::vector<double> xw = matmul_ref(x, wt, 10, in, out), xwb = xw;
  for (int64_t r = 0; r < 10; ++r)
    for (int64_t j = 0; j < out; ++j) xwb[r * out + j] += bvec[j];
  Tensor W = make(w, {out, in}), Bv = make(bvec, {out});
  Tensor l2 = linear(make(x, {10, in}), W, Bv);
  EXPECT_EQ(l2.sizes(), (Shape{10, out}));
  expect_values(l2, xwb, 1e-12, 1e-12, "linear 2-D");
  Tensor l3 = linear(make(x, {2, 5, in}), W, Bv);
  EXPECT_EQ(l3.sizes(), (Shape{2, 5, out}));
  expect_values(l3, xwb, 1e-12, 1e-12, "linear 3-D");
  Tensor l1 = linear(make(slice_ref(x, 0, in), {in}), W, Bv);
  EXPECT_EQ(l1.sizes(), (Shape{out}));
  expect_values(l1, slice_ref(xwb, 0, out), 1e-12, 1e-12, "linear 1-D");
  Tensor ln = linear(make(x, {10, in}), W);
  expect_values(ln, xw, 1e-12, 1e-12, "linear no bias");
  Tensor lf = linear(make(round_f32(x), {10, in}, kFloat32), make(round_f32(w), {out, in}, kFloat32),
                     make(round_f32(bvec), {out}, kFloat32));
  EXPECT_EQ(lf.dtype(), kFloat32);
  expect_values(lf, xwb, 1e-5, 1e-5, "linear f32");
}

TEST(MatmulValues, EdgeShapes) {
  // n = 1, m = 1, k = 1 and combinations.
  for (auto [n, k, m] : std::vector<std::array<int64_t, 3>>{{1, 4, 5}, {3, 4, 1}, {3, 1, 5}, {1, 1, 1}, {1, 7, 1}}) {
    std::vector<double> a = uniform_values(n * k, 171), b = uniform_values(k * m, 172);
    std::string what = "mm " + std::to_string(n) + "x" + std::to_string(k) + "x" + std::to_string(m);
    expect_values(mm(make(a, {n, k}), make(b, {k, m})), matmul_ref(a, b, n, k, m), 1e-12, 1e-12, what);
    expect_values(mm(make(transpose_ref(a, n, k), {k, n}).t(), make(transpose_ref(b, k, m), {m, k}).t()),
                  matmul_ref(a, b, n, k, m), 1e-12, 1e-12, what + " transposed");
    expect_values(
        bmm(make(a, {1, n, k}).expand({3, n, k}), make(b, {1, k, m}).expand({3, k, m})),
        concat_ref(concat_ref(matmul_ref(a, b, n, k, m), matmul_ref(a, b, n, k, m)), matmul_ref(a, b, n, k, m)), 1e-12,
        1e-12, what + " bmm expanded batch");
  }
  // A stepped vector on the right.
  std::vector<double> mat = uniform_values(12, 173), vec = uniform_values(8, 174);
  std::vector<double> vs = {vec[0], vec[2], vec[4], vec[6]};
  expect_values(matmul(make(mat, {3, 4}), make(vec, {8}).slice(0, 0, 8, 2)), matmul_ref(mat, vs, 3, 4, 1), 1e-12, 1e-12,
                "matmul stepped vector");
  // linear on a non-contiguous 3-D input.
  std::vector<double> x = uniform_values(2 * 4 * 3, 175), w = uniform_values(5 * 4, 176);
  Tensor xt = make(x, {2, 3, 4}).transpose(1, 2);  // [2, 4, 3] -> wants in = 3
  std::vector<double> xr =
      concat_ref(transpose_ref(slice_ref(x, 0, 12), 3, 4), transpose_ref(slice_ref(x, 12, 12), 3, 4));
  std::vector<double> w3 = uniform_values(5 * 3, 177);
  expect_values(linear(xt, make(w3, {5, 3})), matmul_ref(xr, transpose_ref(w3, 5, 3), 8, 3, 5), 1e-12, 1e-12,
                "linear transposed 3-D input");
  (void)w;
}

}  // namespace
}  // namespace tapegrad
