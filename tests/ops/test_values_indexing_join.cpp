// Forward values of the indexing ops (index_select, index_add, gather, scatter_add, embedding)
// and of cat, stack, split and chunk.
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
// Indexing
// ---------------------------------------------------------------------------------------------

TEST(IndexingValues, IndexSelect) {
  std::vector<double> v = uniform_values(12, 91);
  Tensor x = make(v, {4, 3});
  Tensor r0 = index_select(x, 0, make_i64({3, 0, 3}));
  EXPECT_EQ(r0.sizes(), (Shape{3, 3}));
  expect_values(r0, concat_ref(concat_ref(slice_ref(v, 9, 3), slice_ref(v, 0, 3)), slice_ref(v, 9, 3)));
  Tensor r1 = index_select(x, 1, make_i32({2, 0}));
  EXPECT_EQ(r1.sizes(), (Shape{4, 2}));
  expect_values(r1, {v[2], v[0], v[5], v[3], v[8], v[6], v[11], v[9]});
  Tensor r2 = index_select(x, -1, make_i64({1}));
  expect_values(r2, {v[1], v[4], v[7], v[10]});
  Tensor empty_idx = index_select(x, 0, tensor<int64_t>(std::vector<int64_t>{}, {0}));
  EXPECT_EQ(empty_idx.sizes(), (Shape{0, 3}));
  // Non-contiguous input.
  Tensor xt = x.t();  // [3, 4]
  expect_values(index_select(xt, 0, make_i64({2})), {v[2], v[5], v[8], v[11]});
  // Integer data.
  Tensor xi = make_i64({10, 11, 12, 13});
  EXPECT_EQ(index_select(xi, 0, make_i64({3, 3, 1})).tolist<int64_t>(), (std::vector<int64_t>{13, 13, 11}));
}

TEST(IndexingValues, IndexAddAccumulatesDuplicates) {
  Tensor x = make({1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4}, {4, 3});
  Tensor src = make({1, 2, 3, 10, 20, 30, 100, 200, 300}, {3, 3});
  Tensor r = index_add(x, 0, make_i64({0, 2, 0}), src);
  expect_values(r, {102, 203, 304, 2, 2, 2, 13, 23, 33, 4, 4, 4});
  expect_values(x, {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4});  // out of place
  Tensor src1 = make({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  Tensor r1 = index_add(x, 1, make_i32({2, 2}), src1);
  expect_values(r1, {1, 1, 4, 2, 2, 9, 3, 3, 14, 4, 4, 19});
}

TEST(IndexingValues, GatherAndScatterAdd) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  Tensor x = make(v, {4, 3});
  // dim 0: out[i][j] = x[idx[i][j]][j]; idx smaller than x in dim 0
  Tensor g0 = gather(x, 0, make_i64({3, 0, 1, 0, 0, 3}, {2, 3}));
  EXPECT_EQ(g0.sizes(), (Shape{2, 3}));
  expect_values(g0, {10, 2, 6, 1, 2, 12});
  // dim 1
  Tensor g1 = gather(x, 1, make_i64({2, 2, 0, 1, 1, 0, 2, 0}, {4, 2}));
  expect_values(g1, {3, 3, 4, 5, 8, 7, 12, 10});
  // int32 index, negative dim
  Tensor g2 = gather(x, -1, make_i32({0, 1, 2, 0}, {4, 1}));
  expect_values(g2, {1, 5, 9, 10});
  // scatter_add with duplicates, dim 0
  Tensor z = zeros({3, 2}, kFloat64);
  Tensor s0 = scatter_add(z, 0, make_i64({0, 1, 0, 1, 0, 0}, {3, 2}), make({1, 2, 3, 4, 5, 6}, {3, 2}));
  expect_values(s0, {9, 6, 0, 6, 0, 0});
  // dim 1, onto a non-zero base
  Tensor base = make({1, 1, 1, 1, 1, 1}, {2, 3});
  Tensor s1 = scatter_add(base, 1, make_i64({2, 2, 2, 0, 1, 0}, {2, 3}), make({1, 2, 3, 4, 5, 6}, {2, 3}));
  expect_values(s1, {1, 1, 7, 11, 6, 1});
  expect_values(base, {1, 1, 1, 1, 1, 1});
  // scatter_add with an index smaller than the input in the scatter dim.
  Tensor s2 = scatter_add(zeros({4, 2}, kFloat64), 0, make_i64({3, 3}, {1, 2}), make({5, 7}, {1, 2}));
  expect_values(s2, {0, 0, 0, 0, 0, 0, 5, 7});
  // Integers.
  Tensor si = scatter_add(make_i64({0, 0, 0}), 0, make_i64({1, 1, 2, 1}), make_i64({1, 2, 3, 4}));
  EXPECT_EQ(si.tolist<int64_t>(), (std::vector<int64_t>{0, 7, 3}));
}

TEST(IndexingValues, Embedding) {
  std::vector<double> w = uniform_values(15, 92);
  Tensor weight = make(w, {5, 3});
  Tensor e = embedding(weight, make_i64({1, 4, 1, 0}, {2, 2}));
  EXPECT_EQ(e.sizes(), (Shape{2, 2, 3}));
  expect_values(e, concat_ref(concat_ref(slice_ref(w, 3, 3), slice_ref(w, 12, 3)),
                              concat_ref(slice_ref(w, 3, 3), slice_ref(w, 0, 3))));
  Tensor e1 = embedding(weight, make_i32({2}));
  EXPECT_EQ(e1.sizes(), (Shape{1, 3}));
  expect_values(e1, slice_ref(w, 6, 3));
  Tensor e0 = embedding(weight, scalar_tensor(3, kInt64));
  EXPECT_EQ(e0.sizes(), (Shape{3}));
  expect_values(e0, slice_ref(w, 9, 3));
}

// ---------------------------------------------------------------------------------------------
// Joining and splitting
// ---------------------------------------------------------------------------------------------

TEST(JoinValues, CatThreePieces) {
  Tensor a = make({1, 2, 3}, {1, 3}), b = make({4, 5, 6, 7, 8, 9}, {2, 3}), c = make({10, 11, 12}, {1, 3});
  Tensor r0 = cat({a, b, c}, 0);
  EXPECT_EQ(r0.sizes(), (Shape{4, 3}));
  expect_values(r0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor p = make({1, 2}, {2, 1}), q = make({3, 4, 5, 6}, {2, 2}), s = make({7, 8, 9, 10, 11, 12}, {2, 3});
  Tensor r1 = cat({p, q, s}, 1);
  EXPECT_EQ(r1.sizes(), (Shape{2, 6}));
  expect_values(r1, {1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12});
  expect_values(cat({p, q, s}, -1), {1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12});
  // A non-contiguous piece.
  Tensor t = make({1, 2, 3, 4}, {2, 2}).t();
  expect_values(cat({t, q}, 0), {1, 3, 2, 4, 3, 4, 5, 6});
  // 3-D, middle dim.
  Tensor u = make({1, 2, 3, 4}, {2, 1, 2}), w = make({5, 6, 7, 8}, {2, 1, 2});
  expect_values(cat({u, w, u}, 1), {1, 2, 5, 6, 1, 2, 3, 4, 7, 8, 3, 4});
  // Empty pieces.
  expect_values(cat({a, zeros({0, 3}, kFloat64), c}, 0), {1, 2, 3, 10, 11, 12});
}

TEST(JoinValues, CatPromotesMixedDtypes) {
  Tensor i32 = make_i32({1, 2}, {1, 2});
  Tensor f32 = make({0.5, 1.5}, {1, 2}, kFloat32);
  Tensor i64 = make_i64({7, 8}, {1, 2});
  Tensor r = cat({i32, f32, i64}, 0);
  EXPECT_EQ(r.dtype(), kFloat32);
  expect_values(r, {1, 2, 0.5, 1.5, 7, 8});
  Tensor ri = cat({i32, i64}, 1);
  EXPECT_EQ(ri.dtype(), kInt64);
  EXPECT_EQ(ri.tolist<int64_t>(), (std::vector<int64_t>{1, 2, 7, 8}));
  Tensor rd = cat({f32, make({0.25, 0.125}, {1, 2}, kFloat64)}, 0);
  EXPECT_EQ(rd.dtype(), kFloat64);
  expect_values(rd, {0.5, 1.5, 0.25, 0.125});
}

TEST(JoinValues, Stack) {
  Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3}), b = make({7, 8, 9, 10, 11, 12}, {2, 3});
  Tensor c = make({13, 14, 15, 16, 17, 18}, {2, 3});
  Tensor s0 = stack({a, b, c}, 0);
  EXPECT_EQ(s0.sizes(), (Shape{3, 2, 3}));
  expect_values(s0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18});
  Tensor s1 = stack({a, b, c}, 1);
  EXPECT_EQ(s1.sizes(), (Shape{2, 3, 3}));
  expect_values(s1, {1, 2, 3, 7, 8, 9, 13, 14, 15, 4, 5, 6, 10, 11, 12, 16, 17, 18});
  Tensor s2 = stack({a, b, c}, -1);
  EXPECT_EQ(s2.sizes(), (Shape{2, 3, 3}));
  expect_values(s2, {1, 7, 13, 2, 8, 14, 3, 9, 15, 4, 10, 16, 5, 11, 17, 6, 12, 18});
  Tensor s3 = stack({scalar_tensor(1.0, kFloat64), scalar_tensor(2.0, kFloat64)}, 0);
  EXPECT_EQ(s3.sizes(), (Shape{2}));
  expect_values(s3, {1, 2});
}

TEST(JoinValues, SplitAndChunk) {
  std::vector<double> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor x = make(v, {5, 2});
  std::vector<Tensor> p = split(x, 2, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].sizes(), (Shape{2, 2}));
  EXPECT_EQ(p[2].sizes(), (Shape{1, 2}));
  expect_values(p[0], {0, 1, 2, 3});
  expect_values(p[1], {4, 5, 6, 7});
  expect_values(p[2], {8, 9});
  std::vector<Tensor> q = split(x, std::vector<int64_t>{1, 3, 1}, 0);
  ASSERT_EQ(q.size(), 3u);
  expect_values(q[0], {0, 1});
  expect_values(q[1], {2, 3, 4, 5, 6, 7});
  expect_values(q[2], {8, 9});
  std::vector<Tensor> r = split(x, std::vector<int64_t>{1, 1}, 1);
  ASSERT_EQ(r.size(), 2u);
  expect_values(r[1], {1, 3, 5, 7, 9});
  std::vector<Tensor> zero_piece = split(x, std::vector<int64_t>{5, 0}, 0);
  ASSERT_EQ(zero_piece.size(), 2u);
  EXPECT_EQ(zero_piece[1].sizes(), (Shape{0, 2}));
  // chunk: 7 into 3 -> 3, 3, 1; 6 into 3 -> 2, 2, 2
  Tensor y = make({0, 1, 2, 3, 4, 5, 6}, {7});
  std::vector<Tensor> c = chunk(y, 3);
  ASSERT_EQ(c.size(), 3u);
  expect_values(c[0], {0, 1, 2});
  expect_values(c[1], {3, 4, 5});
  expect_values(c[2], {6});
  std::vector<Tensor> c2 = chunk(make(v, {2, 5}), 3, 1);
  ASSERT_EQ(c2.size(), 3u);
  expect_values(c2[0], {0, 1, 5, 6});
  expect_values(c2[2], {4, 9});
  std::vector<Tensor> c3 = chunk(make({0, 1, 2, 3, 4, 5}, {6}), 3);
  ASSERT_EQ(c3.size(), 3u);
  for (const Tensor& t : c3) EXPECT_EQ(t.sizes(), (Shape{2}));
  // Pieces are views: a write through a piece reaches the base.
  p[1].fill_(-1.0);
  expect_values(x, {0, 1, 2, 3, -1, -1, -1, -1, 8, 9});
}

}  // namespace
}  // namespace tapegrad
