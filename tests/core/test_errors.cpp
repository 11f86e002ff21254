// Bad inputs throw tapegrad::Error whose message names the op and the offending shapes, dtypes or devices.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

Tensor f32(const Shape& shape) {
  return ones(shape, kFloat32);
}
Tensor f64(const Shape& shape) {
  return ones(shape, kFloat64);
}
Tensor i64(const std::vector<int64_t>& v, const Shape& shape = {}) {
  return tensor<int64_t>(v, shape);
}

// ---------------------------------------------------------------------------------------------
// Elementwise
// ---------------------------------------------------------------------------------------------

TEST(ElementwiseErrors, NonBroadcastableShapes) {
  expect_error([] { add(f32({2, 3}), f32({4})); }, {"add", "[2, 3]", "[4]", "broadcast"});
  expect_error([] { mul(f32({2, 3}), f32({3, 2})); }, {"mul", "[2, 3]", "[3, 2]"});
  expect_error([] { sub(f32({2, 3}), f32({2, 2})); }, {"sub", "[2, 3]", "[2, 2]"});
  expect_error([] { div(f32({5}), f32({4})); }, {"div", "[5]", "[4]"});
  expect_error([] { pow(f32({2, 3}), f32({2})); }, {"pow", "[2, 3]", "[2]"});
  expect_error([] { maximum(f32({2, 3}), f32({4, 3})); }, {"maximum", "[2, 3]", "[4, 3]"});
  expect_error([] { minimum(f32({3, 1, 2}), f32({2, 3})); }, {"minimum", "[3, 1, 2]", "[2, 3]"});
  expect_error([] { f32({2, 3}) + f32({4}); }, {"add", "[2, 3]", "[4]"});
  expect_error([] { f32({2, 3}) * f32({4}); }, {"mul", "[2, 3]", "[4]"});
  expect_error([] { eq(f32({2, 3}), f32({4})); }, {"eq", "[2, 3]", "[4]"});
  expect_error([] { lt(f32({2}), f32({3})); }, {"lt", "[2]", "[3]"});
  expect_error([] { where(gt(f32({2, 3}), 0.0), f32({2, 3}), f32({4})); }, {"where", "[4]"});
}

TEST(ElementwiseErrors, DtypeRules) {
  expect_error([] { neg(gt(f32({2}), 0.0)); }, {"neg", "bool"});
  expect_error([] { where(f32({2}), f32({2}), f32({2})); }, {"where", "bool", "float32"});
  expect_error([] { clamp(gt(f32({2}), 0.0), 0.0, 1.0); }, {"clamp", "bool"});
}

TEST(ElementwiseErrors, ClampMinGreaterThanMax) {
  expect_error([] { clamp(f32({3}), 2.0, 1.0); }, {"clamp", "2", "1"});
}

// clamp() rejects min > max; the in-place form should apply the same rule instead of silently
// writing min or max.
TEST(ElementwiseErrors, ClampInplaceMinGreaterThanMax) {
  Tensor x = tensor<float>({0.0f, 1.5f, 3.0f});
  expect_error([&] { x.clamp_(2.0, 1.0); }, {"clamp", "2", "1"});
}

// 16-bit floats compute on the CPU (test_cpu_16bit_ops.cpp); what they cannot do is a clear error.
TEST(ElementwiseErrors, Float16OnTheCpuLimits) {
  Tensor h = ones({2, 2}, kFloat16);
  expect_error([&] { mm(h, ones({2, 2})); }, {"mm", "same dtype", "float16", "float32"});
  expect_error([&] { linear(ones({2, 2}, kBFloat16), ones({2, 2})); }, {"linear", "same dtype", "bfloat16", "float32"});
  // f16 with bf16 meets at float32.
  EXPECT_EQ((h + ones({2, 2}, kBFloat16)).dtype(), kFloat32);
}

TEST(ElementwiseErrors, InplaceResultMustFitTheTarget) {
  Tensor i = i64({1, 2, 3});
  expect_error([&] { i.add_(f32({3})); }, {"add_", "float32", "int64"});
  expect_error([&] { i.mul_(2.5); }, {"mul_", "float32", "int64"});
  expect_error([&] { i.div_(i64({1, 1, 1})); }, {"div_", "float32", "int64"});
  Tensor x = f32({3});
  expect_error([&] { x.add_(f32({2, 3})); }, {"add_", "[2, 3]", "[3]"});
  expect_error([&] { x.sub_(f32({4})); }, {"sub_", "[4]", "[3]"});
}

// ---------------------------------------------------------------------------------------------
// Matrix products
// ---------------------------------------------------------------------------------------------

TEST(LinalgErrors, MmShapesRankAndDtypes) {
  expect_error([] { mm(f32({2, 3}), f32({4, 5})); }, {"mm", "[2, 3]", "[4, 5]", "3 != 4"});
  expect_error([] { mm(f32({2, 3, 4}), f32({4, 5})); }, {"mm", "2-D", "[2, 3, 4]", "[4, 5]"});
  expect_error([] { mm(f32({3}), f32({3, 2})); }, {"mm", "2-D", "[3]"});
  expect_error([] { mm(f32({2, 3}), f64({3, 2})); }, {"mm", "float32", "float64"});
  expect_error([] { mm(ones({2, 3}, kInt64), ones({3, 2}, kInt64)); }, {"mm", "int64"});
  expect_error([] { mm(ones({2, 3}, kInt32), ones({3, 2}, kInt32)); }, {"mm", "int32"});
  expect_error([] { bmm(f32({2, 3, 4}), f32({3, 4, 5})); }, {"bmm", "[2, 3, 4]", "[3, 4, 5]"});
  expect_error([] { bmm(f32({2, 3, 4}), f32({2, 5, 5})); }, {"bmm", "[2, 3, 4]", "[2, 5, 5]"});
  expect_error([] { bmm(f32({3, 4}), f32({4, 5})); }, {"bmm", "3-D", "[3, 4]"});
}

TEST(LinalgErrors, MatmulBadShapes) {
  expect_error([] { matmul(f32({3}), f32({4})); }, {"matmul", "3", "4"});
  expect_error([] { matmul(f32({2, 3, 4}), f32({5, 6})); }, {"matmul", "[2, 3, 4]", "[5, 6]"});
  expect_error([] { matmul(f32({2, 3, 4}), f32({5})); }, {"matmul", "[2, 3, 4]", "[5]"});
  expect_error([] { matmul(f32({2, 3, 4}), f32({2, 5, 6})); }, {"matmul", "[2, 3, 4]", "[2, 5, 6]"});
  expect_error([] { matmul(f32({2, 3, 4}), f32({3, 4, 6})); }, {"matmul", "[2]", "[3]"});  // batch 2 vs 3
  expect_error([] { matmul(f32({}), f32({3})); }, {"matmul", "[]", "[3]"});
  // 2-D operands go through mm; the message still carries both shapes.
  expect_error([] { matmul(f32({2, 3}), f32({4, 5})); }, {"[2, 3]", "[4, 5]", "cannot be multiplied"});
  expect_error([] { matmul(f32({2, 3}), f64({3, 5})); }, {"float32", "float64"});
}

TEST(LinalgErrors, AddmmAndLinear) {
  expect_error([] { addmm(f32({4}), f32({2, 3}), f32({3, 5})); }, {"addmm", "[4]", "[2, 5]"});
  expect_error([] { addmm(f64({5}), f32({2, 3}), f32({3, 5})); }, {"addmm", "float64", "float32"});
  expect_error([] { addmm(f32({5}), f32({2, 3}), f32({4, 5})); }, {"addmm", "[2, 3]", "[4, 5]"});
  expect_error([] { linear(f32({2, 3}), f32({4, 5})); }, {"linear", "[2, 3]", "[4, 5]"});
  expect_error([] { linear(f32({2, 5}), f32({4, 5}), f32({3})); }, {"linear", "[3]", "[4, 5]"});
  expect_error([] { linear(f32({2, 5}), f32({5})); }, {"linear", "[5]"});
}

// ---------------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------------

TEST(ViewErrors, ViewAndReshape) {
  Tensor x = f32({2, 3});
  expect_error([&] { x.t().view({6}); }, {"view", "[6]", "[3, 2]", "reshape"});
  expect_error([&] { x.view({4}); }, {"view", "[4]", "6"});
  expect_error([&] { x.reshape({5}); }, {"reshape", "[5]", "6"});
  expect_error([&] { x.view({-1, -1}); }, {"view", "-1", "[-1, -1]"});
  expect_error([&] { x.reshape({-1, 2, -1}); }, {"reshape", "-1", "[-1, 2, -1]"});
  expect_error([&] { x.view({-1, 4}); }, {"view", "[-1, 4]", "6"});
  expect_error([&] { x.reshape({-2, -3}); }, {"reshape", "-2"});
  expect_error([&] { x.view({0, -1}); }, {"view", "[0, -1]"});
  // reshape of the same non-contiguous tensor works (it copies).
  EXPECT_EQ(x.t().reshape({6}).sizes(), (Shape{6}));
}

TEST(ViewErrors, Permute) {
  Tensor x = f32({2, 3, 4});
  expect_error([&] { x.permute({0, 0, 1}); }, {"permute", "0", "[0, 0, 1]"});
  expect_error([&] { x.permute({0, 1}); }, {"permute", "3", "[0, 1]"});
  expect_error([&] { x.permute({0, 1, 2, 3}); }, {"permute", "[0, 1, 2, 3]"});
  expect_error([&] { x.permute({0, 1, 3}); }, {"permute", "3"});
  expect_error([&] { x.permute({0, -3, 1}); }, {"permute", "0"});  // -3 is dim 0 again
}

TEST(ViewErrors, NarrowSelectSliceTranspose) {
  Tensor x = f32({2, 3});
  expect_error([&] { x.narrow(0, 1, 5); }, {"narrow", "1", "5", "[2, 3]"});
  expect_error([&] { x.narrow(1, -4, 1); }, {"narrow", "[2, 3]"});
  expect_error([&] { x.narrow(1, 0, -1); }, {"narrow", "-1"});
  expect_error([&] { x.narrow(2, 0, 1); }, {"narrow", "dim 2", "2 dims"});
  expect_error([&] { x.select(0, 2); }, {"select", "2", "[2, 3]"});
  expect_error([&] { x.select(1, -4); }, {"select", "-4", "[2, 3]"});
  expect_error([&] { x.select(-3, 0); }, {"select", "-3", "2 dims"});
  expect_error([&] { x[5]; }, {"select", "5", "[2, 3]"});
  expect_error([&] { scalar_tensor(1.0).select(0, 0); }, {"select", "0-dim"});
  expect_error([&] { x.slice(2, 0, 1); }, {"slice", "dim 2", "2 dims"});
  expect_error([&] { x.slice(0, 0, 2, 0); }, {"slice", "step", "0"});
  expect_error([&] { x.slice(0, 0, 2, -1); }, {"slice", "step", "-1"});
  expect_error([&] { scalar_tensor(1.0).slice(0, 0, 1); }, {"slice", "0-dim"});
  expect_error([&] { x.transpose(0, 2); }, {"transpose", "dim 2", "2 dims"});
  expect_error([&] { x.transpose(-3, 0); }, {"transpose", "-3"});
  expect_error([&] { f32({2, 3, 4}).t(); }, {"t", "[2, 3, 4]", "transpose"});
  expect_error([&] { x.flatten(1, 0); }, {"flatten", "1", "0"});
  expect_error([&] { x.size(2); }, {"size", "dim 2"});
}

TEST(ViewErrors, SqueezeUnsqueezeExpand) {
  Tensor x = f32({2, 1, 3});
  expect_error([&] { x.squeeze(3); }, {"squeeze", "dim 3"});
  expect_error([&] { x.squeeze(-4); }, {"squeeze", "-4"});
  expect_error([&] { x.unsqueeze(4); }, {"unsqueeze", "dim 4"});
  expect_error([&] { x.unsqueeze(-5); }, {"unsqueeze", "-5"});
  expect_error([&] { f32({2, 3}).expand({4, 3}); }, {"expand", "[2, 3]", "[4, 3]"});
  expect_error([&] { f32({2, 3}).expand({2, 4}); }, {"expand", "[2, 3]", "[2, 4]"});
  expect_error([&] { f32({2, 3}).expand({3}); }, {"expand", "[3]", "[2, 3]"});
  expect_error([&] { f32({3}).expand({-1, 3}); }, {"expand", "-1", "[-1, 3]"});
  expect_error([&] { f32({2, 3}).expand_as(f32({3, 3})); }, {"expand", "[2, 3]", "[3, 3]"});
}

TEST(ViewErrors, CopyInto) {
  Tensor x = f32({2, 3});
  expect_error([&] { x.copy_(f32({4})); }, {"copy_", "[4]", "[2, 3]"});
  expect_error([&] { f32({3}).copy_(f32({2, 3})); }, {"copy_", "[2, 3]", "[3]"});
  expect_error([&] { x.copy_(Tensor()); }, {"copy_", "undefined"});
}

// ---------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------

TEST(ReductionErrors, BadDims) {
  Tensor x = f32({2, 3});
  expect_error([&] { sum(x, {2}); }, {"sum", "dim 2", "2 dims"});
  expect_error([&] { sum(x, {-3}); }, {"sum", "-3"});
  expect_error([&] { sum(x, {0, 0}); }, {"sum", "0", "[0, 0]"});
  expect_error([&] { sum(x, {1, -1}); }, {"sum", "1", "[1, -1]"});
  expect_error([&] { mean(x, {5}); }, {"mean", "dim 5"});
  expect_error([&] { mean(x, {0, -2}); }, {"mean", "[0, -2]"});
  expect_error([&] { x.sum(3); }, {"sum", "dim 3"});
  expect_error([&] { var(x, Shape{2}); }, {"var", "dim 2"});
  expect_error([&] { var(x, Shape{0, 0}); }, {"var", "[0, 0]"});
  expect_error([&] { max(x, 2); }, {"max", "dim 2"});
  expect_error([&] { min(x, -3); }, {"min", "-3"});
  expect_error([&] { argmax(x, 2); }, {"argmax", "dim 2"});
  expect_error([&] { argmin(x, 2); }, {"argmin", "dim 2"});
  expect_error([&] { softmax(x, 2); }, {"softmax", "dim 2"});
  expect_error([&] { log_softmax(x, -3); }, {"log_softmax", "-3"});
}

TEST(ReductionErrors, DtypeAndEmptyInputs) {
  expect_error([] { mean(i64({1, 2, 3})); }, {"mean", "int64", "floating-point", "to(kFloat32)"});
  expect_error([] { mean(ones({2, 2}, kInt32), {0}); }, {"mean", "int32"});
  expect_error([] { var(i64({1, 2, 3})); }, {"var", "int64"});
  expect_error([] { max(zeros({0})); }, {"max", "empty", "[0]"});
  expect_error([] { min(zeros({2, 0})); }, {"min", "empty", "[2, 0]"});
  expect_error([] { max(zeros({2, 0}), 1); }, {"max", "size 0", "[2, 0]"});
  expect_error([] { argmax(zeros({0, 3}), 0); }, {"argmax", "[0, 3]"});
  expect_error([] { argmax(zeros({0})); }, {"argmax", "[0]"});
  expect_error([] { max(gt(f32({2}), 0.0)); }, {"max", "bool"});
  expect_error([] { softmax(i64({1, 2}), 0); }, {"softmax", "int64"});
}

// ---------------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------------

TEST(LossErrors, CrossEntropyTargets) {
  Tensor logits = f32({4, 3});
  expect_error([&] { cross_entropy(logits, i64({0, 5, 1, 2})); }, {"cross_entropy", "5", "3 classes"});
  expect_error([&] { cross_entropy(logits, i64({0, 1, -1, 2})); }, {"cross_entropy", "-1", "3 classes"});
  expect_error([&] { cross_entropy(logits, i64({0, 1, 3, 2})); }, {"cross_entropy", "target 3", "3 classes"});
  expect_error([&] { cross_entropy(logits, tensor<int32_t>({0, 1, 7, 2})); }, {"cross_entropy", "7", "3 classes"});
  expect_error([&] { cross_entropy(logits, tensor<float>({0, 1, 1, 2})); }, {"cross_entropy", "float32", "int64"});
  expect_error([&] { cross_entropy(logits, gt(f32({4}), 0.0)); }, {"cross_entropy", "bool"});
  expect_error([&] { cross_entropy(logits, i64({0, 1, 2, 0, 1})); }, {"cross_entropy", "[5]", "[4, 3]"});
  expect_error([&] { cross_entropy(logits, i64({0, 1, 2, 0}, {2, 2})); }, {"cross_entropy", "[2, 2]", "[4, 3]"});
  expect_error([&] { cross_entropy(f32({2, 3, 4}), i64({0, 1})); }, {"cross_entropy", "[2, 3, 4]"});
  expect_error([&] { cross_entropy(ones({4, 3}, kInt64), i64({0, 1, 2, 0})); }, {"cross_entropy", "int64"});
  expect_error([&] { cross_entropy(f32({4, 0}), i64({0, 0, 0, 0})); }, {"cross_entropy", "[4, 0]"});
  // The ignored value is allowed, other negatives are not.
  CrossEntropyOptions ignore;
  ignore.ignore_index = -1;
  EXPECT_NO_THROW(cross_entropy(logits, i64({0, -1, 1, 2}), ignore));
  expect_error([&] { cross_entropy(logits, i64({0, -100, 1, 2}), ignore); }, {"cross_entropy", "-100", "3 classes"});
}

TEST(LossErrors, CrossEntropyLabelSmoothingRange) {
  Tensor logits = f32({2, 3});
  Tensor target = i64({0, 1});
  for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    CrossEntropyOptions o;
    o.label_smoothing = bad;
    expect_error([&] { cross_entropy(logits, target, o); }, {"cross_entropy", "label_smoothing"});
  }
  CrossEntropyOptions ok;
  ok.label_smoothing = 1.0;
  EXPECT_NO_THROW(cross_entropy(logits, target, ok));
}

TEST(LossErrors, NllAndMse) {
  Tensor lp = f32({3, 4});
  expect_error([&] { nll_loss(lp, i64({0, 4, 1})); }, {"nll_loss", "4", "4 classes"});
  expect_error([&] { nll_loss(lp, tensor<double>({0, 1, 1})); }, {"nll_loss", "float64"});
  expect_error([&] { nll_loss(lp, i64({0, 1})); }, {"nll_loss", "[2]", "[3, 4]"});
  CrossEntropyOptions s;
  s.label_smoothing = 0.1;
  expect_error([&] { nll_loss(lp, i64({0, 1, 2}), s); }, {"nll_loss", "label_smoothing"});
  expect_error([] { mse_loss(f32({2, 3}), f32({3, 2})); }, {"mse_loss", "[2, 3]", "[3, 2]"});
  expect_error([] { mse_loss(f32({2, 3}), f32({3})); }, {"mse_loss", "[2, 3]", "[3]"});
}

// ---------------------------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------------------------

TEST(IndexingErrors, IndexSelect) {
  Tensor x = f32({4, 3});
  expect_error([&] { index_select(x, 0, i64({0, 4})); }, {"index_select", "4", "size 4"});
  expect_error([&] { index_select(x, 1, i64({-1})); }, {"index_select", "-1", "size 3"});
  expect_error([&] { index_select(x, 0, tensor<float>({0, 1})); }, {"index_select", "float32"});
  expect_error([&] { index_select(x, 0, i64({0, 1, 2, 3}, {2, 2})); }, {"index_select", "1-D"});
  expect_error([&] { index_select(x, 2, i64({0})); }, {"index_select", "dim 2"});
  expect_error([&] { index_select(scalar_tensor(1.0), 0, i64({0})); }, {"index_select", "0-dim"});
}

TEST(IndexingErrors, IndexAdd) {
  Tensor x = f32({4, 3});
  expect_error([&] { index_add(x, 0, i64({0, 9}), f32({2, 3})); }, {"index_add", "9", "size 4"});
  expect_error([&] { index_add(x, 0, i64({0, 1}), f32({3, 3})); }, {"index_add", "[3, 3]", "[2, 3]"});
  expect_error([&] { index_add(x, 0, i64({0, 1}), f64({2, 3})); }, {"index_add", "float64", "float32"});
  expect_error([&] { index_add(x, 0, tensor<double>({0, 1}), f32({2, 3})); }, {"index_add", "float64"});
}

TEST(IndexingErrors, GatherAndScatterAdd) {
  Tensor x = f32({4, 3});
  expect_error([&] { gather(x, 1, i64({0, 1, 3, 0, 0, 0, 0, 0}, {4, 2})); }, {"gather", "3", "size 3"});
  expect_error([&] { gather(x, 0, i64({-1, 0, 0}, {1, 3})); }, {"gather", "-1", "size 4"});
  expect_error([&] { gather(x, 0, tensor<float>({0, 0, 0}, {1, 3})); }, {"gather", "float32"});
  expect_error([&] { gather(x, 0, i64({0, 0, 0})); }, {"gather", "[3]", "[4, 3]"});
  expect_error([&] { gather(x, 0, i64({0, 0, 0, 0}, {2, 2})); }, {"gather", "[2, 2]", "[4, 3]"});
  expect_error([&] { gather(x, 2, i64({0, 0, 0}, {1, 3})); }, {"gather", "dim 2"});
  Tensor idx = i64({0, 1, 4}, {1, 3});
  expect_error([&] { scatter_add(x, 0, idx, f32({1, 3})); }, {"scatter_add", "4", "size 4"});
  expect_error([&] { scatter_add(x, 0, tensor<double>({0, 1, 2}, {1, 3}), f32({1, 3})); }, {"scatter_add", "float64"});
  expect_error([&] { scatter_add(x, 0, i64({0, 1, 2}, {1, 3}), f32({2, 3})); }, {"scatter_add", "[2, 3]", "[1, 3]"});
  expect_error([&] { scatter_add(x, 0, i64({0, 1, 2}, {1, 3}), f64({1, 3})); }, {"scatter_add", "float64", "float32"});
  expect_error([&] { scatter_add(x, 0, i64({0, 1}, {1, 2}), f32({1, 2})); }, {"scatter_add", "[1, 2]", "[4, 3]"});
}

TEST(IndexingErrors, Embedding) {
  Tensor weight = f32({5, 3});
  expect_error([&] { embedding(weight, i64({1, 7})); }, {"7", "5"});
  expect_error([&] { embedding(weight, i64({1, -1})); }, {"-1", "5"});
  expect_error([&] { embedding(weight, tensor<float>({1, 2})); }, {"float32"});
  expect_error([&] { embedding(f32({5}), i64({1})); }, {"embedding", "[5]"});
}

// ---------------------------------------------------------------------------------------------
// Joining and splitting
// ---------------------------------------------------------------------------------------------

TEST(JoinErrors, CatAndStack) {
  expect_error([] { cat({f32({2, 3}), f32({2, 4})}, 0); }, {"cat", "[2, 3]", "[2, 4]"});
  expect_error([] { cat({f32({2, 3}), f32({3, 3}), f32({2, 4})}, 1); }, {"cat", "[3, 3]", "[2, 3]"});
  expect_error([] { cat({f32({2, 3}), f32({3})}, 0); }, {"cat", "[3]", "[2, 3]"});
  expect_error([] { cat({}, 0); }, {"cat", "empty"});
  expect_error([] { cat({f32({2, 3}), f32({2, 3})}, 2); }, {"cat", "dim 2"});
  expect_error([] { cat({scalar_tensor(1.0), scalar_tensor(2.0)}); }, {"cat", "zero-dim"});
  expect_error([] { stack({f32({2, 3}), f32({3, 2})}); }, {"stack", "[3, 2]", "[2, 3]"});
  expect_error([] { stack({f32({2, 3}), f32({2, 3}), f32({2})}, 1); }, {"stack", "[2]", "[2, 3]"});
  expect_error([] { stack({}); }, {"stack", "empty"});
  expect_error([] { stack({f32({2, 3}), f32({2, 3})}, 3); }, {"stack", "dim 3"});
}

TEST(JoinErrors, SplitAndChunk) {
  Tensor x = f32({5, 2});
  expect_error([&] { split(x, std::vector<int64_t>{2, 2}, 0); }, {"split", "[2, 2]", "4", "5"});
  expect_error([&] { split(x, std::vector<int64_t>{3, 3}, 0); }, {"split", "[3, 3]", "6", "5"});
  expect_error([&] { split(x, std::vector<int64_t>{6, -1}, 0); }, {"split", "-1"});
  expect_error([&] { split(x, 0, 0); }, {"split", "0"});
  expect_error([&] { split(x, 2, 2); }, {"split", "dim 2"});
  expect_error([&] { chunk(x, 0); }, {"chunk", "0"});
  expect_error([&] { chunk(x, -2); }, {"chunk", "-2"});
  expect_error([&] { chunk(x, 2, 5); }, {"chunk", "dim 5"});
  expect_error([&] { split(scalar_tensor(1.0), 1); }, {"split", "0-dim"});
}

// ---------------------------------------------------------------------------------------------
// Creation, devices, dtypes
// ---------------------------------------------------------------------------------------------

TEST(CreationErrors, TensorFromValues) {
  expect_error([] { tensor<float>({1.0f, 2.0f, 3.0f}, {2, 2}); }, {"tensor", "3", "[2, 2]"});
  expect_error([] { tensor<int64_t>({1, 2}, {3}); }, {"tensor", "2", "[3]"});
  expect_error([] { tensor<double>({}, {1}); }, {"tensor", "0", "[1]"});
  expect_error([] { zeros({2, -1}); }, {"-1", "[2, -1]"});
}

TEST(CreationErrors, Devices) {
  expect_error([] { Device("gpu"); }, {"Device", "gpu"});
  expect_error([] { Device("cuda:x"); }, {"Device", "cuda:x"});
  expect_error([] { Device("cpu:1"); }, {"Device", "cpu", "1"});
  expect_error([] { Device("cuda:"); }, {"Device", "cuda:"});
  expect_error([] { Device("cuda:-1"); }, {"Device", "cuda:-1"});
  expect_error([] { Device("CPU"); }, {"Device", "CPU"});
  expect_error([] { Device(" cpu"); }, {"Device"});
  expect_error([] { Device(DeviceKind::CUDA, -1); }, {"Device", "-1"});
  expect_error([] { Device(DeviceKind::CPU, 2); }, {"Device", "cpu", "2"});
  EXPECT_EQ(Device("cuda:3").index(), 3);
  EXPECT_EQ(Device("cpu:0"), kCPU);
}

TEST(CreationErrors, Dtypes) {
  expect_error([] { parse_dtype("float8"); }, {"parse_dtype", "float8"});
  expect_error([] { parse_dtype(""); }, {"parse_dtype"});
  expect_error([] { parse_dtype("Float32"); }, {"parse_dtype", "Float32"});
  EXPECT_EQ(parse_dtype("f32"), kFloat32);
  expect_error([] { i64({1, 2}).data<double>(); }, {"data", "int64", "float64"});
  expect_error([] { f32({2}).data<double>(); }, {"data", "float32", "float64"});
  expect_error([] { f64({2}).data<float>(); }, {"data", "float64", "float32"});
  expect_error([] { f32({2}).data<int64_t>(); }, {"data", "float32", "int64"});
}

TEST(CreationErrors, CudaTensorsInACpuOnlyBuild) {
  if (cuda::is_available()) GTEST_SKIP() << "this build has a CUDA backend";
  expect_error([] { zeros({2}, kCUDA); }, {"cuda"});
  expect_error([] { ones({2, 3}, TensorOptions("cuda:1")); }, {"cuda"});
  expect_error([] { empty({2}, TensorOptions(kFloat64).device(kCUDA)); }, {"cuda"});
  expect_error([] { f32({2}).to(kCUDA); }, {"cuda"});
  expect_error([] { f32({2}).to(Device("cuda:1"), kFloat64); }, {"cuda"});
  expect_error([] { tensor<float>({1.0f, 2.0f}, {2}, TensorOptions(kCUDA)); }, {"cuda"});
  expect_error([] { randn({2}, kCUDA); }, {"cuda"});
}

TEST(CreationErrors, RandomAndRanges) {
  expect_error([] { randint(5, 5, {3}); }, {"randint", "5"});
  expect_error([] { randint(5, 2, {3}); }, {"randint", "5", "2"});
  expect_error([] { randint(0, 2, {3}, kBool); }, {"randint", "bool"});
  expect_error([] { arange(0, 5, 0); }, {"arange", "0"});
  expect_error([] { arange(0, 5, -1); }, {"arange", "-1", "5"});
  expect_error([] { arange(0, std::numeric_limits<double>::infinity()); }, {"arange"});
  expect_error([] { linspace(0, 1, -1); }, {"linspace", "-1"});
  expect_error([] { rand({2}, kInt64); }, {"int64"});
  expect_error([] { randn({2}, kInt32); }, {"int32"});
  Tensor t = zeros({2});
  expect_error([&] { uniform_(t, 1.0, 0.0); }, {"uniform_", "1", "0"});
  expect_error([&] { normal_(t, 0.0, -1.0); }, {"normal_", "-1"});
  Tensor nc = zeros({2, 3}).t();
  expect_error([&] { uniform_(nc, 0.0, 1.0); }, {"uniform_", "contiguous"});
  expect_error([] { set_num_threads(0); }, {"set_num_threads", "0"});
}

// ---------------------------------------------------------------------------------------------
// Tensor accessors
// ---------------------------------------------------------------------------------------------

TEST(TensorErrors, ItemAndRequiresGrad) {
  expect_error([] { f32({2, 3}).item(); }, {"item", "[2, 3]"});
  expect_error([] { f32({0}).item(); }, {"item", "[0]"});
  expect_error([] { f32({2}).item<int64_t>(); }, {"item", "[2]"});
  expect_error([] { ones({2}, kInt64).requires_grad_(); }, {"requires_grad_", "int64"});
  expect_error([] { ones({2}, kInt32).requires_grad_(true); }, {"requires_grad_", "int32"});
  expect_error([] { ones({2}, kBool).requires_grad_(); }, {"requires_grad_", "bool"});
  expect_error([] { zeros({2}, TensorOptions(kInt64).requires_grad(true)); }, {"requires_grad_", "int64"});
  Tensor leaf = f64({2}).requires_grad_();
  Tensor y = leaf * 2.0;
  expect_error([&] { y.requires_grad_(false); }, {"requires_grad_", "non-leaf", "detach"});
  expect_error([] { f32({2}).retain_grad(); }, {"retain_grad", "require grad"});
  Tensor x = f32({2});
  expect_error([&] { x.set_grad(f32({3})); }, {"set_grad", "[3]", "[2]"});
  expect_error([&] { x.set_grad(f64({2})); }, {"set_grad", "float64", "float32"});
}

TEST(TensorErrors, UndefinedTensorPassedToOps) {
  Tensor u;
  Tensor x = f32({2, 3});
  expect_error([&] { add(u, x); }, {"add", "undefined"});
  expect_error([&] { mul(x, u); }, {"mul", "undefined"});
  expect_error([&] { u + x; }, {"add", "undefined"});
  expect_error([&] { exp(u); }, {"exp", "undefined"});
  expect_error([&] { relu(u); }, {"relu", "undefined"});
  expect_error([&] { sum(u); }, {"sum", "undefined"});
  expect_error([&] { mean(u, {0}); }, {"mean", "undefined"});
  expect_error([&] { var(u); }, {"var", "undefined"});
  expect_error([&] { max(u); }, {"max", "undefined"});
  expect_error([&] { argmax(u); }, {"argmax", "undefined"});
  expect_error([&] { mm(u, x); }, {"mm", "undefined"});
  expect_error([&] { matmul(x, u); }, {"matmul", "undefined"});
  expect_error([&] { linear(u, x); }, {"linear", "undefined"});
  expect_error([&] { linear(x, u); }, {"linear", "undefined"});
  expect_error([&] { softmax(u, 0); }, {"softmax", "undefined"});
  expect_error([&] { cross_entropy(u, i64({0})); }, {"cross_entropy", "undefined"});
  expect_error([&] { cross_entropy(x, u); }, {"cross_entropy", "undefined"});
  expect_error([&] { mse_loss(x, u); }, {"mse_loss", "undefined"});
  expect_error([&] { where(u, x, x); }, {"where", "undefined"});
  expect_error([&] { clamp(u, 0.0, 1.0); }, {"clamp", "undefined"});
  expect_error([&] { cat({x, u}); }, {"cat", "undefined"});
  expect_error([&] { stack({u}); }, {"stack", "undefined"});
  expect_error([&] { index_select(u, 0, i64({0})); }, {"index_select", "undefined"});
  expect_error([&] { gather(x, 0, u); }, {"gather", "undefined"});
  expect_error([&] { embedding(u, i64({0})); }, {"embedding", "undefined"});
  expect_error([&] { split(u, 1); }, {"split", "undefined"});
  expect_error([&] { eq(u, x); }, {"eq", "undefined"});
  expect_error([&] { u.sizes(); }, {"undefined"});
  expect_error([&] { u.view({1}); }, {"undefined"});
  expect_error([&] { u.to(kFloat64); }, {"undefined"});
  expect_error([&] { u.item(); }, {"undefined"});
  expect_error([&] { u.backward(); }, {"backward", "undefined"});
  expect_error([&] { x.add_(u); }, {"add_", "undefined"});
  // Scalar forms: the message at least says the tensor is undefined.
  expect_error([&] { mul(u, 2.0); }, {"undefined"});
  expect_error([&] { u + 1.0; }, {"undefined"});
  expect_error([&] { gt(u, 0.0); }, {"undefined"});
}

// ---------------------------------------------------------------------------------------------
// Autograd
// ---------------------------------------------------------------------------------------------

TEST(AutogradErrors, BackwardPreconditions) {
  expect_error([] { f32({1}).backward(); }, {"backward", "does not require grad"});
  expect_error([] { sum(f32({3})).backward(); }, {"backward", "does not require grad"});
  Tensor x = f64({2, 3}).requires_grad_();
  Tensor y = x * 2.0;
  expect_error([&] { y.backward(); }, {"backward", "[2, 3]", "gradient"});
  expect_error([&] { y.backward(f64({3, 2})); }, {"backward", "[3, 2]", "[2, 3]"});
  expect_error([&] { y.backward(f64({6})); }, {"backward", "[6]", "[2, 3]"});
  expect_error([&] { autograd::backward({y, y}, {f64({2, 3})}); }, {"backward", "2", "1"});
  {
    NoGradGuard no_grad;
    Tensor z = x * 2.0;  // not recorded
    expect_error([&] { z.sum().backward(); }, {"backward", "does not require grad"});
  }
}

TEST(AutogradErrors, SecondBackwardWithoutRetainGraph) {
  Tensor x = f64({3}).requires_grad_();
  Tensor loss = (x * x).sum();
  loss.backward();
  expect_error([&] { loss.backward(); }, {"backward", "second time", "retain_graph"});
  // With retain_graph the second pass works and accumulates.
  Tensor w = f64({3}).requires_grad_();
  Tensor l2 = (w * w).sum();
  l2.backward(Tensor(), true);
  EXPECT_NO_THROW(l2.backward());
  EXPECT_EQ(w.grad().tolist<double>(), (std::vector<double>{4, 4, 4}));
  // A graph that shares a freed part with a new root.
  Tensor a = f64({2}).requires_grad_();
  Tensor h = exp(a);
  Tensor first = h.sum();
  first.backward();
  Tensor second = (h * 3.0).sum();
  expect_error([&] { second.backward(); }, {"backward", "retain_graph"});
}

TEST(AutogradErrors, InplaceOnLeafThatRequiresGrad) {
  Tensor w = f32({3}).requires_grad_();
  expect_error([&] { w.add_(1.0); }, {"add_", "leaf", "NoGradGuard"});
  expect_error([&] { w.sub_(f32({3})); }, {"sub_", "leaf"});
  expect_error([&] { w.mul_(2.0); }, {"mul_", "leaf"});
  expect_error([&] { w.div_(f32({3})); }, {"div_", "leaf"});
  expect_error([&] { w.clamp_(0.0, 1.0); }, {"clamp_", "leaf"});
  expect_error([&] { w.fill_(0.0); }, {"fill_", "leaf"});
  expect_error([&] { w.zero_(); }, {"leaf"});
  expect_error([&] { w.copy_(f32({3})); }, {"copy_", "leaf"});
  expect_error([&] { w += f32({3}); }, {"add_", "leaf"});
  // Under NoGradGuard the update is allowed.
  {
    NoGradGuard no_grad;
    EXPECT_NO_THROW(w.sub_(f32({3}), 0.5));
  }
  EXPECT_EQ(w.tolist<float>(), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  // A view of such a leaf cannot be modified in place either while gradients are recorded.
  Tensor v = w.select(0, 1);
  expect_error([&] { v.add_(1.0); }, {"add_", "view"});
}

TEST(AutogradErrors, ModifiedSavedTensorThenBackward) {
  Tensor x = f64({3}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor z = (y * y).sum();  // saves y
  y.add_(1.0);
  expect_error([&] { z.backward(); }, {"backward", "in-place", "[3]"});

  // The output saved by exp, modified under NoGradGuard.
  Tensor a = f64({2, 2}).requires_grad_();
  Tensor e = exp(a);
  Tensor le = e.sum();
  {
    NoGradGuard no_grad;
    e.mul_(2.0);
  }
  expect_error([&] { le.backward(); }, {"backward", "in-place", "[2, 2]"});
  Tensor s = sigmoid(a);
  Tensor ls = s.sum();
  {
    NoGradGuard no_grad;
    s.zero_();
  }
  expect_error([&] { ls.backward(); }, {"backward", "in-place", "[2, 2]"});
  // A write through another view of the same storage counts too.
  Tensor b = f64({4}).requires_grad_();
  Tensor c = b * 1.0;
  Tensor d = (c * c).sum();
  {
    NoGradGuard no_grad;
    c.view({2, 2}).select(0, 1).fill_(5.0);
  }
  expect_error([&] { d.backward(); }, {"backward", "in-place"});
}

// ---------------------------------------------------------------------------------------------
// Messages should name the op the caller used (error.h: "names the op"), not an internal helper
// it delegates to, and show the caller's shapes.
// ---------------------------------------------------------------------------------------------

TEST(ErrorMessages, NameTheOpTheCallerUsed) {
  expect_error([] { matmul(f32({2, 3}), f32({4, 5})); }, {"matmul", "[2, 3]", "[4, 5]"});
  expect_error([] { matmul(f32({2, 3}), f32({4})); }, {"matmul", "[2, 3]", "[4]"});
  expect_error([] { matmul(f32({3}), f32({4, 5})); }, {"matmul", "[3]", "[4, 5]"});
  expect_error([] { embedding(f32({5, 3}), i64({1, 7})); }, {"embedding", "7", "5"});
  expect_error([] { mul(Tensor(), 2.0); }, {"mul", "undefined"});
  expect_error([] { gt(Tensor(), 0.0); }, {"gt", "undefined"});
}

}  // namespace
}  // namespace tapegrad
