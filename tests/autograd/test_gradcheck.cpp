// Gradient checks for every differentiable op in the public API.
//
// Each table entry names a case, the shapes (and value ranges) of its f64 leaf inputs, and a
// function of those leaves. tapegrad::autograd::gradcheck compares the backward pass with central
// finite differences for that function. The cases cover plain shapes, broadcasting between
// operands of different ranks, and non-contiguous inputs: the leaves themselves are always
// contiguous (gradcheck requires it), so a case that wants a strided operand takes a view of the
// leaf (transpose, slice with a step, select, expand) inside its function before calling the op.
//
// Adding an op is one more row in tests/support/op_table.h (whose gradcheck, value and CUDA parity
// tests walk it: tests/ops/test_op_table.cpp, which holds the plain case of each op there); the
// variants (broadcast, strided, options) are entries in cases() here, each its own ctest test.
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using autograd::GradcheckOptions;
using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

// One leaf input: its shape and the range its values are drawn from (uniform on [low, high)).
struct Input {
  Shape shape;
  double low = -1.0;
  double high = 1.0;
};

// Values in [-1, 1): fine for smooth functions, and ties or hits on a kink at 0 are improbable.
Input in(Shape shape) {
  return Input{std::move(shape), -1.0, 1.0};
}
// Strictly positive values, for log, sqrt, rsqrt, divisors and pow bases.
Input pos(Shape shape) {
  return Input{std::move(shape), 0.5, 2.0};
}
// A custom range.
Input range(Shape shape, double low, double high) {
  return Input{std::move(shape), low, high};
}

struct Case {
  std::string name;  // letters, digits and underscores (it becomes the test's name)
  std::vector<Input> inputs;
  Fn fn;
  GradcheckOptions options = {};
};

// How gtest prints a case (instead of its bytes).
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

// Integer index / target tensors.
Tensor idx(const std::vector<int64_t>& values, const Shape& shape = {}) {
  return tensor<int64_t>(values, shape);
}

// Pieces from split/chunk combined with a different weight each (and squared, so that each
// element's gradient depends on its own value): a gradient routed to the wrong piece or the wrong
// element shows up.
Tensor weighted_sum(const std::vector<Tensor>& pieces) {
  Tensor total = square(pieces[0]).sum();
  for (size_t i = 1; i < pieces.size(); ++i) total = total + square(pieces[i]).sum() * static_cast<double>(i + 1);
  return total;
}

// Options for functions that round through float32: a larger step so that f32 rounding
// (~6e-8 relative) is small next to the finite difference.
GradcheckOptions through_f32() {
  GradcheckOptions options;
  options.eps = 1e-3;
  options.atol = 1e-3;
  options.rtol = 1e-2;
  return options;
}

// A stable seed per (case, input), independent of the case's position in the table.
uint64_t seed_for(const std::string& name, size_t input) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h + 7919 * input;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

std::vector<Case> cases() {
  std::vector<Case> c;

  // --- Unary elementwise: a plain case and a strided-view case each -----------------------------
  c.push_back({"neg_transposed", {in({3, 4})}, [](const Inputs& x) { return neg(x[0].transpose(0, 1)); }});
  c.push_back({"neg_operator", {in({5})}, [](const Inputs& x) { return -x[0]; }});
  c.push_back({"abs_slice_step2", {in({3, 6})}, [](const Inputs& x) { return abs(x[0].slice(1, 0, 6, 2)); }});
  c.push_back({"exp_permuted", {in({2, 3, 4})}, [](const Inputs& x) { return exp(x[0].permute({2, 0, 1})); }});
  c.push_back({"log_slice_step2", {pos({5, 3})}, [](const Inputs& x) { return log(x[0].slice(0, 0, 5, 2)); }});
  c.push_back({"sqrt_transposed", {pos({2, 5})}, [](const Inputs& x) { return sqrt(x[0].t()); }});
  c.push_back({"rsqrt_selected", {pos({3, 4, 2})}, [](const Inputs& x) { return rsqrt(x[0].select(1, 2)); }});
  c.push_back({"tanh_expanded", {range({1, 4}, -2, 2)}, [](const Inputs& x) { return tanh(x[0].expand({3, 4})); }});
  c.push_back({"sigmoid_transposed", {range({4, 3}, -3, 3)}, [](const Inputs& x) { return sigmoid(x[0].t()); }});
  c.push_back({"relu_slice_step2", {in({6, 2})}, [](const Inputs& x) { return relu(x[0].slice(0, 1, 6, 2)); }});
  c.push_back({"gelu_transposed", {range({3, 4}, -3, 3)}, [](const Inputs& x) { return gelu(x[0].t()); }});
  c.push_back({"square_expanded", {in({3, 1})}, [](const Inputs& x) { return square(x[0].expand({2, 3, 4})); }});
  c.push_back({"leaky_relu_negative_slope_transposed", {in({3, 5})}, [](const Inputs& x) {
                 return leaky_relu(x[0].t(), -0.3);
               }});
  // beta 3, threshold 2: inputs on both sides of x = 2/3 (the linear branch has gradient 1).
  c.push_back({"softplus_beta_threshold_expanded", {range({1, 6}, -1.5, 1.5)}, [](const Inputs& x) {
                 return softplus(x[0].expand({2, 6}), 3.0, 2.0);
               }});
  c.push_back({"elu_alpha_slice_step2", {range({6, 2}, -3, 2)}, [](const Inputs& x) {
                 return elu(x[0].slice(0, 1, 6, 2), 0.7);
               }});
  c.push_back({"unary_methods", {pos({2, 3})}, [](const Inputs& x) {
                 return x[0].exp().log().sqrt().tanh().sigmoid().abs().relu();
               }});

  // --- Binary elementwise ------------------------------------------------------------------
  c.push_back({"add_broadcast", {in({3, 1, 4}), in({2, 4})}, [](const Inputs& x) { return add(x[0], x[1]); }});
  c.push_back({"add_broadcast_one", {in({3, 4}), in({1})}, [](const Inputs& x) { return add(x[0], x[1]); }});
  c.push_back({"add_broadcast_0dim", {in({3, 4}), in({})}, [](const Inputs& x) { return add(x[0], x[1]); }});
  c.push_back({"add_alpha_broadcast", {in({2, 3}), in({3})}, [](const Inputs& x) { return add(x[0], x[1], 2.5); }});
  c.push_back({"add_transposed", {in({4, 3}), in({3, 4})}, [](const Inputs& x) { return add(x[0].t(), x[1]); }});
  c.push_back({"add_scalar", {in({3, 4})}, [](const Inputs& x) { return add(x[0], 1.5); }});
  c.push_back({"add_mixed_dtype", {in({3, 4})}, [](const Inputs& x) {
                 Tensor constant = tensor<float>({1.f, 2.f, 3.f, 4.f}, {4});  // f32, no grad: promotes to f64
                 return add(x[0], constant) * x[0];
               }});
  c.push_back({"sub_broadcast", {in({2, 4}), in({3, 1, 4})}, [](const Inputs& x) { return sub(x[0], x[1]); }});
  c.push_back({"sub_alpha_broadcast", {in({4}), in({2, 4})}, [](const Inputs& x) { return sub(x[0], x[1], -0.75); }});
  c.push_back(
      {"sub_slice_step2", {in({3, 8}), in({3, 4})}, [](const Inputs& x) { return sub(x[0].slice(1, 0, 8, 2), x[1]); }});
  c.push_back({"sub_scalar", {in({5})}, [](const Inputs& x) { return sub(x[0], 0.25); }});
  c.push_back({"mul_broadcast", {in({3, 1, 4}), in({2, 4})}, [](const Inputs& x) { return mul(x[0], x[1]); }});
  c.push_back({"mul_broadcast_one", {in({1}), in({2, 3})}, [](const Inputs& x) { return mul(x[0], x[1]); }});
  c.push_back({"mul_same_tensor", {in({4})}, [](const Inputs& x) { return mul(x[0], x[0]); }});
  c.push_back({"mul_selected_expanded", {in({2, 3, 4}), in({4})}, [](const Inputs& x) {
                 return mul(x[0].select(0, 1), x[1].expand({3, 4}));
               }});
  c.push_back({"mul_scalar", {in({3, 4})}, [](const Inputs& x) { return mul(x[0], -3.0); }});
  c.push_back({"div_broadcast", {in({3, 1, 4}), pos({2, 4})}, [](const Inputs& x) { return div(x[0], x[1]); }});
  c.push_back({"div_broadcast_one", {in({2, 3}), pos({1})}, [](const Inputs& x) { return div(x[0], x[1]); }});
  c.push_back({"div_transposed", {in({3, 4}), pos({4, 3})}, [](const Inputs& x) { return div(x[0], x[1].t()); }});
  c.push_back({"div_scalar", {in({3, 4})}, [](const Inputs& x) { return div(x[0], 4.0); }});
  c.push_back({"div_scalar_by_tensor", {pos({3, 4})}, [](const Inputs& x) { return 2.0 / x[0]; }});
  c.push_back({"arith_operators", {in({3, 4}), in({4})}, [](const Inputs& x) {
                 const Tensor& a = x[0];
                 const Tensor& b = x[1];
                 return (2.0 - a * b) / (1.5 + b) + a / 3.0 - (b - 1.0) * 0.5 + (a + 0.25) * 2.0;
               }});
  c.push_back({"pow_tensor_tensor_broadcast", {pos({3, 1, 4}), range({2, 4}, -1.5, 1.5)}, [](const Inputs& x) {
                 return pow(x[0], x[1]);
               }});
  c.push_back(
      {"pow_tensor_tensor_transposed", {pos({4, 3}), in({3, 4})}, [](const Inputs& x) { return pow(x[0].t(), x[1]); }});
  c.push_back({"pow_tensor_scalar", {pos({3, 4})}, [](const Inputs& x) { return pow(x[0], 2.5); }});
  c.push_back({"pow_tensor_scalar_negative_exp", {pos({5})}, [](const Inputs& x) { return pow(x[0], -1.5); }});
  c.push_back({"pow_tensor_integer_exp_negative_base", {in({2, 3})}, [](const Inputs& x) { return pow(x[0], 3.0); }});
  c.push_back({"pow_tensor_scalar_method_slice", {pos({6, 2})}, [](const Inputs& x) {
                 return x[0].slice(0, 0, 6, 2).pow(0.5);
               }});
  c.push_back({"pow_scalar_tensor", {in({3, 4})}, [](const Inputs& x) { return pow(2.0, x[0]); }});
  c.push_back({"pow_scalar_tensor_transposed", {in({3, 4})}, [](const Inputs& x) { return pow(0.5, x[0].t()); }});
  c.push_back({"maximum_broadcast", {in({3, 1, 4}), in({2, 4})}, [](const Inputs& x) { return maximum(x[0], x[1]); }});
  c.push_back(
      {"maximum_transposed", {in({4, 3}), in({3, 4})}, [](const Inputs& x) { return maximum(x[0].t(), x[1]); }});
  c.push_back({"maximum_scalar", {in({3, 4})}, [](const Inputs& x) { return maximum(x[0], 0.2); }});
  c.push_back({"minimum_broadcast", {in({2, 4}), in({3, 1, 4})}, [](const Inputs& x) { return minimum(x[0], x[1]); }});
  c.push_back({"minimum_slice_step2", {in({3, 8}), in({3, 4})}, [](const Inputs& x) {
                 return minimum(x[0].slice(1, 1, 8, 2), x[1]);
               }});
  c.push_back({"minimum_scalar", {in({3, 4})}, [](const Inputs& x) { return minimum(x[0], -0.1); }});

  // --- where and clamp ---------------------------------------------------------------------
  c.push_back(
      {"where", {in({3, 4}), in({3, 4})}, [](const Inputs& x) { return where(gt(x[0], x[1]), x[0] * 2.0, x[1]); }});
  c.push_back({"where_broadcast", {in({3, 4}), in({4})}, [](const Inputs& x) {
                 return where(lt(x[0], 0.0), x[0], x[1]);  // condition [3, 4], b [4]
               }});
  c.push_back({"where_broadcast_condition", {in({2, 3}), in({2, 3})}, [](const Inputs& x) {
                 Tensor condition = tensor<float>({1.f, 0.f, 1.f}, {3}).to(kBool);  // [3] broadcast to [2, 3]
                 return where(condition, x[0], x[1]);
               }});
  c.push_back({"where_scalar", {in({3, 4})}, [](const Inputs& x) { return where(ge(x[0], 0.0), x[0], 0.5); }});
  c.push_back({"where_transposed", {in({4, 3}), in({3, 4})}, [](const Inputs& x) {
                 Tensor a = x[0].t();
                 return where(le(a, x[1]), a, x[1] * 3.0);
               }});
  c.push_back({"clamp", {in({4, 5})}, [](const Inputs& x) { return clamp(x[0], -0.5, 0.5); }});
  c.push_back({"clamp_min_only", {in({4, 5})}, [](const Inputs& x) { return clamp(x[0], -0.2); }});
  c.push_back({"clamp_max_only", {in({4, 5})}, [](const Inputs& x) { return clamp(x[0], -kInf, 0.3); }});
  c.push_back({"clamp_transposed", {in({4, 5})}, [](const Inputs& x) { return clamp(x[0].t(), -0.5, 0.5); }});

  // --- Reductions --------------------------------------------------------------------------
  c.push_back({"sum_dim_keepdim", {in({2, 3, 4})}, [](const Inputs& x) { return sum(x[0], {-1}, true); }});
  c.push_back({"sum_dims_nonadjacent", {in({2, 3, 4, 2})}, [](const Inputs& x) { return sum(x[0], {0, 2}); }});
  c.push_back({"sum_dims_nonadjacent_keepdim", {in({2, 3, 4, 2})}, [](const Inputs& x) {
                 return sum(x[0], {3, 1}, true);
               }});
  c.push_back({"sum_transposed", {in({2, 3, 4})}, [](const Inputs& x) { return sum(x[0].transpose(0, 2), {1}); }});
  c.push_back({"sum_methods", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].sum(1, true) * x[0].sum(); }});
  c.push_back({"mean_dim_keepdim", {in({2, 3, 4})}, [](const Inputs& x) { return mean(x[0], {1}, true); }});
  c.push_back({"mean_dims_nonadjacent_keepdim", {in({2, 3, 4, 2})}, [](const Inputs& x) {
                 return mean(x[0], {0, 2}, true);
               }});
  c.push_back({"mean_slice_step2", {in({6, 4})}, [](const Inputs& x) { return mean(x[0].slice(0, 0, 6, 2), {0}); }});
  c.push_back({"mean_methods", {in({3, 4})}, [](const Inputs& x) { return x[0].mean(0) + x[0].mean(); }});
  c.push_back({"var_all_population", {in({3, 4})}, [](const Inputs& x) { return var(x[0], 0.0); }});
  c.push_back({"var_dim_unbiased", {in({3, 5})}, [](const Inputs& x) { return var(x[0], {1}, 1.0); }});
  c.push_back({"var_dim_population", {in({3, 5})}, [](const Inputs& x) { return var(x[0], {0}, 0.0); }});
  c.push_back({"var_dims_nonadjacent_keepdim", {in({2, 3, 4})}, [](const Inputs& x) {
                 return var(x[0], {0, 2}, 1.0, true);
               }});
  c.push_back({"var_transposed", {in({3, 5})}, [](const Inputs& x) { return var(x[0].t(), {1}, 1.0); }});
  c.push_back({"max_all", {in({3, 4})}, [](const Inputs& x) { return max(x[0]); }});
  c.push_back({"max_all_transposed", {in({3, 4})}, [](const Inputs& x) { return x[0].t().max(); }});
  c.push_back({"min_all", {in({3, 4})}, [](const Inputs& x) { return min(x[0]); }});
  c.push_back({"min_all_slice_step2", {in({3, 6})}, [](const Inputs& x) { return x[0].slice(1, 1, 6, 2).min(); }});
  c.push_back({"max_dim", {in({3, 4})}, [](const Inputs& x) { return max(x[0], 1).values; }});
  c.push_back({"max_dim_keepdim", {in({2, 3, 4})}, [](const Inputs& x) { return max(x[0], 1, true).values; }});
  c.push_back({"max_dim_transposed", {in({3, 4})}, [](const Inputs& x) { return max(x[0].t(), -1).values; }});
  c.push_back({"min_dim", {in({3, 4})}, [](const Inputs& x) { return min(x[0], 0).values; }});
  c.push_back({"min_dim_keepdim", {in({2, 3, 4})}, [](const Inputs& x) { return min(x[0], -1, true).values; }});
  c.push_back(
      {"min_dim_slice_step2", {in({3, 8})}, [](const Inputs& x) { return min(x[0].slice(1, 0, 8, 2), 1).values; }});

  // --- Matrix products ---------------------------------------------------------------------
  c.push_back({"mm_transposed", {in({4, 3}), in({5, 4})}, [](const Inputs& x) { return mm(x[0].t(), x[1].t()); }});
  c.push_back({"mm_slice_step2", {in({3, 8}), in({4, 5})}, [](const Inputs& x) {
                 return mm(x[0].slice(1, 0, 8, 2), x[1]);  // inner stride 2: not a BLAS layout
               }});
  c.push_back({"bmm", {in({2, 3, 4}), in({2, 4, 5})}, [](const Inputs& x) { return bmm(x[0], x[1]); }});
  c.push_back({"bmm_transposed", {in({2, 3, 4}), in({2, 5, 4})}, [](const Inputs& x) {
                 return bmm(x[0], x[1].transpose(1, 2));
               }});
  c.push_back({"bmm_permuted", {in({3, 2, 4}), in({2, 4, 5})}, [](const Inputs& x) {
                 return bmm(x[0].permute({1, 0, 2}), x[1]);  // batch stride smaller than row stride
               }});
  c.push_back({"bmm_expanded_batch", {in({1, 3, 4}), in({2, 4, 5})}, [](const Inputs& x) {
                 return bmm(x[0].expand({2, 3, 4}), x[1]);  // batch stride 0
               }});
  c.push_back({"matmul_1d_1d", {in({4}), in({4})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_1d_2d", {in({4}), in({4, 3})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_2d_1d", {in({3, 4}), in({4})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_2d_2d", {in({3, 4}), in({4, 2})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_3d_2d", {in({2, 3, 4}), in({4, 5})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_2d_3d", {in({3, 4}), in({2, 4, 5})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_1d_3d", {in({4}), in({2, 4, 3})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_3d_1d", {in({2, 3, 4}), in({4})}, [](const Inputs& x) { return matmul(x[0], x[1]); }});
  c.push_back({"matmul_4d_3d_broadcast", {in({2, 1, 3, 4}), in({3, 4, 2})}, [](const Inputs& x) {
                 return matmul(x[0], x[1]);  // -> [2, 3, 3, 2]
               }});
  c.push_back({"matmul_transposed", {in({2, 4, 3}), in({5, 4})}, [](const Inputs& x) {
                 return x[0].transpose(1, 2).matmul(x[1].t());
               }});
  c.push_back({"addmm", {in({3, 5}), in({3, 4}), in({4, 5})}, [](const Inputs& x) { return addmm(x[0], x[1], x[2]); }});
  c.push_back({"addmm_beta_alpha_broadcast", {in({5}), in({3, 4}), in({4, 5})}, [](const Inputs& x) {
                 return addmm(x[0], x[1], x[2], 0.5, -2.0);
               }});
  c.push_back({"addmm_broadcast_row_transposed", {in({1, 5}), in({4, 3}), in({4, 5})}, [](const Inputs& x) {
                 return addmm(x[0], x[1].t(), x[2], 1.5, 0.25);
               }});
  c.push_back({"linear_no_bias", {in({3, 4}), in({5, 4})}, [](const Inputs& x) { return linear(x[0], x[1]); }});
  c.push_back({"linear_3d_input", {in({2, 3, 4}), in({5, 4}), in({5})}, [](const Inputs& x) {
                 return linear(x[0], x[1], x[2]);
               }});
  c.push_back({"linear_3d_transposed_input", {in({3, 2, 4}), in({5, 4}), in({5})}, [](const Inputs& x) {
                 return linear(x[0].transpose(0, 1), x[1], x[2]);
               }});
  c.push_back(
      {"linear_1d_input", {in({4}), in({5, 4}), in({5})}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }});

  // --- Softmax -----------------------------------------------------------------------------
  c.push_back({"softmax_dim0", {range({4, 3}, -2, 2)}, [](const Inputs& x) { return softmax(x[0], 0); }});
  c.push_back({"softmax_middle_dim", {range({2, 3, 4}, -2, 2)}, [](const Inputs& x) { return softmax(x[0], 1); }});
  c.push_back({"softmax_transposed", {range({5, 3}, -2, 2)}, [](const Inputs& x) { return x[0].t().softmax(1); }});
  c.push_back({"log_softmax_dim0", {range({4, 3}, -2, 2)}, [](const Inputs& x) { return log_softmax(x[0], 0); }});
  c.push_back(
      {"log_softmax_middle_dim", {range({2, 3, 4}, -2, 2)}, [](const Inputs& x) { return log_softmax(x[0], 1); }});
  c.push_back(
      {"log_softmax_transposed", {range({5, 3}, -2, 2)}, [](const Inputs& x) { return x[0].t().log_softmax(-1); }});

  // --- Losses ------------------------------------------------------------------------------
  auto ce = [](Reduction reduction, int64_t ignore_index = -100, double label_smoothing = 0.0) {
    CrossEntropyOptions options;
    options.reduction = reduction;
    options.ignore_index = ignore_index;
    options.label_smoothing = label_smoothing;
    return options;
  };
  c.push_back({"cross_entropy_sum", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({1, 0, 4, 2}), ce(Reduction::Sum));
               }});
  c.push_back({"cross_entropy_none", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({1, 0, 4, 2}), ce(Reduction::None));
               }});
  c.push_back({"cross_entropy_ignore_index_mean", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({1, -100, 4, 2}), ce(Reduction::Mean));
               }});
  c.push_back({"cross_entropy_custom_ignore_index_none", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({3, 1, 3, 0}), ce(Reduction::None, 3));
               }});
  c.push_back({"cross_entropy_label_smoothing_mean", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({1, 0, 4, 2}), ce(Reduction::Mean, -100, 0.1));
               }});
  c.push_back({"cross_entropy_label_smoothing_ignore_sum", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({1, 0, -100, 2}), ce(Reduction::Sum, -100, 0.2));
               }});
  c.push_back({"cross_entropy_label_smoothing_ignore_mean", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({1, 0, -100, 2}), ce(Reduction::Mean, -100, 0.3));
               }});
  c.push_back({"cross_entropy_unbatched", {range({5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], scalar_tensor(3, kInt64), ce(Reduction::Mean));
               }});
  c.push_back({"cross_entropy_unbatched_label_smoothing", {range({5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], scalar_tensor(3, kInt64), ce(Reduction::Sum, -100, 0.1));
               }});
  c.push_back({"cross_entropy_int32_target_transposed", {range({5, 4}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0].t(), tensor<int32_t>({2, 4, 0, 0}), ce(Reduction::Mean));
               }});
  c.push_back({"nll_loss_mean", {range({4, 5}, -2, 2)}, [ce](const Inputs& x) {
                 return nll_loss(log_softmax(x[0], 1), idx({1, 0, 4, 2}), ce(Reduction::Mean));
               }});
  c.push_back({"nll_loss_sum", {in({4, 5})}, [ce](const Inputs& x) {
                 return nll_loss(x[0], idx({1, 0, 4, 2}), ce(Reduction::Sum));
               }});
  c.push_back({"nll_loss_none", {in({4, 5})}, [ce](const Inputs& x) {
                 return nll_loss(x[0], idx({1, 0, 4, 2}), ce(Reduction::None));
               }});
  c.push_back({"nll_loss_ignore_index_mean", {in({4, 5})}, [ce](const Inputs& x) {
                 return nll_loss(x[0], idx({1, 2, 4, 2}), ce(Reduction::Mean, 2));
               }});
  c.push_back({"nll_loss_unbatched", {in({5})}, [ce](const Inputs& x) {
                 return nll_loss(x[0], scalar_tensor(1, kInt64), ce(Reduction::Mean));
               }});
  c.push_back({"nll_loss_transposed", {in({5, 4})}, [ce](const Inputs& x) {
                 return nll_loss(x[0].t(), idx({1, 0, 4, 2}), ce(Reduction::Mean));
               }});
  c.push_back({"mse_loss_mean", {in({3, 4}), in({3, 4})}, [](const Inputs& x) { return mse_loss(x[0], x[1]); }});
  c.push_back(
      {"mse_loss_sum", {in({3, 4}), in({3, 4})}, [](const Inputs& x) { return mse_loss(x[0], x[1], Reduction::Sum); }});
  c.push_back({"mse_loss_none", {in({3, 4}), in({3, 4})}, [](const Inputs& x) {
                 return mse_loss(x[0], x[1], Reduction::None);
               }});
  c.push_back({"mse_loss_constant_target_transposed", {in({4, 3})}, [](const Inputs& x) {
                 Tensor target = full({3, 4}, 0.25, kFloat64);
                 return mse_loss(x[0].t(), target);
               }});

  // --- Indexing ----------------------------------------------------------------------------
  c.push_back({"index_select_dim0", {in({5, 3})}, [](const Inputs& x) {
                 return index_select(x[0], 0, idx({4, 0, 2, 0}));  // a repeated row accumulates
               }});
  c.push_back({"index_select_dim1", {in({3, 5})}, [](const Inputs& x) {
                 return index_select(x[0], 1, idx({1, 1, 3}));
               }});
  c.push_back({"index_select_transposed", {in({5, 3})}, [](const Inputs& x) {
                 return index_select(x[0].t(), 1, idx({0, 3, 3, 4}));
               }});
  c.push_back({"index_add_dim0", {in({5, 3}), in({3, 3})}, [](const Inputs& x) {
                 return index_add(x[0], 0, idx({0, 2, 0}), x[1]);
               }});
  c.push_back({"index_add_dim1", {in({3, 5}), in({3, 2})}, [](const Inputs& x) {
                 return index_add(x[0], 1, idx({4, 1}), x[1]);
               }});
  c.push_back({"index_add_transposed", {in({5, 3}), in({2, 3})}, [](const Inputs& x) {
                 return index_add(x[0].t(), 1, idx({3, 3}), x[1].t());
               }});
  c.push_back({"gather_dim0", {in({3, 4})}, [](const Inputs& x) {
                 return gather(x[0], 0, idx({0, 2, 1, 2, 1, 1, 0, 0}, {2, 4}));
               }});
  c.push_back({"gather_dim1", {in({3, 4})}, [](const Inputs& x) {
                 return gather(x[0], 1, idx({3, 3, 0, 1, 2, 0}, {3, 2}));
               }});
  c.push_back({"gather_transposed", {in({4, 3})}, [](const Inputs& x) {
                 return gather(x[0].t(), 1, idx({3, 3, 0, 1, 2, 0}, {3, 2}));
               }});
  c.push_back({"scatter_add_dim1", {in({3, 5}), in({3, 2})}, [](const Inputs& x) {
                 return scatter_add(x[0], 1, idx({4, 4, 0, 2, 1, 3}, {3, 2}), x[1]);
               }});
  c.push_back({"scatter_add_dim0", {in({3, 4}), in({2, 4})}, [](const Inputs& x) {
                 return scatter_add(x[0], 0, idx({0, 1, 2, 0, 2, 1, 0, 0}, {2, 4}), x[1]);
               }});
  c.push_back({"scatter_add_transposed_src", {in({3, 5}), in({2, 3})}, [](const Inputs& x) {
                 return scatter_add(x[0], 1, idx({4, 4, 0, 2, 1, 3}, {3, 2}), x[1].t());
               }});
  c.push_back({"embedding", {in({6, 3})}, [](const Inputs& x) {
                 return embedding(x[0], idx({1, 5, 1, 0, 2, 5}, {2, 3}));
               }});
  c.push_back({"embedding_1d_indices", {in({6, 3})}, [](const Inputs& x) { return embedding(x[0], idx({4, 4, 0})); }});
  c.push_back({"embedding_transposed_weight", {in({3, 6})}, [](const Inputs& x) {
                 return embedding(x[0].t(), idx({1, 5, 1, 3}));
               }});

  // --- Joining and splitting ---------------------------------------------------------------
  c.push_back({"cat_dim0", {in({2, 3}), in({4, 3})}, [](const Inputs& x) { return cat({x[0], x[1]}, 0); }});
  c.push_back({"cat_dim1_transposed_piece", {in({2, 3}), in({4, 2})}, [](const Inputs& x) {
                 return cat({x[0], x[1].t()}, 1);
               }});
  c.push_back({"cat_three_last_dim", {in({2, 2, 1}), in({2, 2, 3}), in({2, 4, 2})}, [](const Inputs& x) {
                 return cat({x[0], x[1], x[2].slice(1, 0, 4, 2)}, -1);
               }});
  c.push_back({"cat_same_tensor_twice", {in({2, 3})}, [](const Inputs& x) { return cat({x[0], x[0] * 2.0}, 0); }});
  c.push_back({"stack_dim0", {in({2, 3}), in({2, 3})}, [](const Inputs& x) { return stack({x[0], x[1]}, 0); }});
  c.push_back({"stack_dim1_transposed_piece", {in({2, 3}), in({3, 2})}, [](const Inputs& x) {
                 return stack({x[0], x[1].t()}, 1);
               }});
  c.push_back({"stack_last_dim", {in({4}), in({4}), in({4})}, [](const Inputs& x) {
                 return stack({x[0], x[1], x[2]}, -1);
               }});
  c.push_back({"split_size", {in({7, 3})}, [](const Inputs& x) { return weighted_sum(split(x[0], 3, 0)); }});
  c.push_back({"split_sizes_dim1", {in({3, 6})}, [](const Inputs& x) {
                 return weighted_sum(split(x[0], {1, 3, 2}, 1));
               }});
  c.push_back({"split_transposed", {in({3, 5})}, [](const Inputs& x) { return weighted_sum(split(x[0].t(), 2, 0)); }});
  c.push_back({"chunk", {in({7, 2})}, [](const Inputs& x) { return weighted_sum(chunk(x[0], 3, 0)); }});
  c.push_back({"chunk_dim1", {in({2, 6, 2})}, [](const Inputs& x) { return weighted_sum(chunk(x[0], 2, 1)); }});
  c.push_back({"split_pieces_returned", {in({6, 2})}, [](const Inputs& x) {
                 std::vector<Tensor> pieces = split(x[0], 2, 0);
                 return pieces[2] * 3.0 - pieces[0];  // the middle piece gets no gradient
               }});

  // --- Views and copies --------------------------------------------------------------------
  c.push_back({"view", {in({3, 4})}, [](const Inputs& x) { return x[0].view({2, 6}) * x[0].view({2, -1}); }});
  c.push_back({"reshape_contiguous", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].reshape({4, -1}); }});
  c.push_back({"reshape_transposed_copies", {in({3, 4})}, [](const Inputs& x) {
                 return x[0].t().reshape({2, 6}) * tensor<double>({1, 2, 3, 4, 5, 6}, {6});
               }});
  c.push_back({"flatten_all", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].flatten(); }});
  c.push_back({"flatten_range", {in({2, 3, 4, 2})}, [](const Inputs& x) { return x[0].flatten(1, 2); }});
  c.push_back({"flatten_permuted", {in({2, 3, 4})}, [](const Inputs& x) {
                 return x[0].permute({2, 0, 1}).flatten(0, 1);
               }});
  c.push_back({"transpose", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].transpose(0, 2) * 2.0; }});
  c.push_back({"transpose_negative_dims", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].transpose(-1, -2); }});
  c.push_back({"t_2d", {in({3, 4})}, [](const Inputs& x) { return x[0].t(); }});
  c.push_back({"t_1d", {in({4})}, [](const Inputs& x) { return x[0].t(); }});
  c.push_back({"permute", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].permute({1, 2, 0}); }});
  c.push_back({"narrow", {in({5, 4})}, [](const Inputs& x) { return x[0].narrow(0, 1, 3); }});
  c.push_back({"narrow_transposed", {in({5, 4})}, [](const Inputs& x) { return x[0].t().narrow(1, 2, 2); }});
  c.push_back({"slice_step2", {in({7, 3})}, [](const Inputs& x) { return x[0].slice(0, 1, 7, 2); }});
  c.push_back({"slice_step2_both_dims", {in({6, 5})}, [](const Inputs& x) {
                 return x[0].slice(0, 0, 6, 2).slice(1, 1, 5, 3);
               }});
  c.push_back({"select", {in({3, 4})}, [](const Inputs& x) { return x[0].select(1, 2); }});
  c.push_back({"select_negative_index", {in({3, 4, 2})}, [](const Inputs& x) { return x[0].select(0, -1); }});
  c.push_back({"select_operator_twice", {in({3, 4})}, [](const Inputs& x) { return x[0][1] * x[0][2]; }});
  c.push_back({"squeeze_all", {in({3, 1, 4, 1})}, [](const Inputs& x) { return x[0].squeeze(); }});
  c.push_back({"squeeze_dim", {in({3, 1, 4})}, [](const Inputs& x) { return x[0].squeeze(1); }});
  c.push_back({"unsqueeze", {in({3, 4})}, [](const Inputs& x) { return x[0].unsqueeze(1); }});
  c.push_back({"unsqueeze_last_transposed", {in({3, 4})}, [](const Inputs& x) { return x[0].t().unsqueeze(-1); }});
  c.push_back({"expand", {in({3, 1})}, [](const Inputs& x) { return x[0].expand({2, 3, 4}); }});
  c.push_back({"expand_keep_size", {in({1, 4})}, [](const Inputs& x) { return x[0].expand({3, -1}); }});
  c.push_back({"expand_as", {in({4}), in({3, 4})}, [](const Inputs& x) { return x[0].expand_as(x[1]) * x[1]; }});
  c.push_back({"contiguous_of_transposed", {in({3, 4})}, [](const Inputs& x) { return x[0].t().contiguous(); }});
  c.push_back({"contiguous_of_contiguous", {in({3, 4})}, [](const Inputs& x) { return x[0].contiguous() * 2.0; }});
  c.push_back({"contiguous_and_to_same_dtype_are_identity", {in({3, 4})}, [](const Inputs& x) {
                 return x[0].contiguous().to(kFloat64);  // the leaf itself is the output
               }});
  c.push_back({"clone", {in({3, 4})}, [](const Inputs& x) { return x[0].clone(); }});
  c.push_back({"clone_slice_step2", {in({3, 4})}, [](const Inputs& x) { return x[0].slice(1, 0, 4, 2).clone(); }});
  c.push_back({"to_f32_roundtrip",
               {in({3, 4})},
               [](const Inputs& x) { return x[0].to(kFloat32).to(kFloat64); },
               through_f32()});
  c.push_back({"to_f32_compute_roundtrip",
               {in({3, 4})},
               [](const Inputs& x) { return square(x[0].t().to(kFloat32)).to(kFloat64); },
               through_f32()});
  c.push_back({"view_chain", {in({4, 3})}, [](const Inputs& x) {
                 return x[0].t().slice(1, 0, 4, 2).unsqueeze(0).expand({2, 3, 2}).permute({2, 1, 0});
               }});

  // --- In-place ops on non-leaf tensors ----------------------------------------------------
  c.push_back({"inplace_mul_add", {in({3, 4}), in({3, 4}), in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * 1.0;
                 y.mul_(x[1]);
                 y.add_(x[2], 0.5);
                 return y;
               }});
  c.push_back({"inplace_broadcast_and_strided_operand", {in({3, 4}), in({4}), in({4, 3})}, [](const Inputs& x) {
                 Tensor y = x[0] * 1.0;
                 y.mul_(x[1]);
                 y.sub_(x[2].t(), 2.0);
                 return y;
               }});
  c.push_back({"inplace_div", {in({3, 4}), pos({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] + 0.0;
                 y.div_(x[1]);
                 return y;
               }});
  c.push_back({"inplace_scalar_forms", {in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * x[0];
                 y.mul_(2.0);
                 y.add_(1.0);
                 y.sub_(0.5);
                 y.div_(3.0);
                 return y * x[0];
               }});
  c.push_back({"inplace_clamp", {in({4, 5})}, [](const Inputs& x) {
                 Tensor y = x[0] * 1.0;
                 y.clamp_(-0.5, 0.5);
                 return y;
               }});
  c.push_back({"inplace_compound_operators", {in({3, 4}), in({3, 4}), pos({4})}, [](const Inputs& x) {
                 Tensor y = x[0] * 1.0;
                 y += x[1];
                 y *= x[0];
                 y -= x[1] * 0.5;
                 y /= x[2];
                 return y;
               }});
  c.push_back({"inplace_zero_then_add", {in({3, 4}), in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * 2.0;
                 y.zero_();  // the old contents (and their gradient path) are gone
                 y.add_(x[1]);
                 return y * x[0];
               }});
  c.push_back({"inplace_add_self_alias", {in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * x[0];
                 y.add_(y);  // other is self: y <- 2y
                 return y;
               }});
  c.push_back({"inplace_add_alpha_self_alias", {in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * x[0];
                 y.add_(y, 0.5);  // y <- 1.5y; add's gradient needs no saved values
                 return y;
               }});
  c.push_back({"inplace_after_mul_by_scalar", {in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * x[0];
                 Tensor z = y * 2.0;  // d z / d y = 2 needs no copy of y
                 y.add_(1.0);
                 return z + y;
               }});
  c.push_back({"inplace_on_div_by_scalar_output", {in({3, 4})}, [](const Inputs& x) {
                 Tensor z = (x[0] * x[0]) / 2.0;  // d z / d y = 1/2 needs neither y nor z
                 z.add_(1.0);
                 return z;
               }});
  c.push_back({"copy_from_own_transpose", {in({3, 3})}, [](const Inputs& x) {
                 Tensor buffer = x[0] * 2.0;
                 buffer.copy_(buffer.t());  // source and destination share storage
                 return buffer * x[0];
               }});
  c.push_back({"inplace_then_view", {in({3, 4}), in({3, 4})}, [](const Inputs& x) {
                 Tensor y = x[0] * 1.0;
                 y.add_(x[1]);
                 return y.t().slice(0, 0, 4, 2);
               }});
  c.push_back({"inplace_into_plain_buffer", {in({3, 4}), in({4})}, [](const Inputs& x) {
                 Tensor y = zeros({3, 4}, kFloat64);  // no grad until the in-place op writes a tracked value
                 y.add_(x[0]);
                 y.mul_(x[1]);
                 return y * 2.0;
               }});
  c.push_back({"copy_into_fresh_buffer", {in({3, 4})}, [](const Inputs& x) {
                 Tensor buffer = zeros({3, 4}, kFloat64);
                 buffer.copy_(x[0]);
                 return buffer * 2.0;
               }});
  c.push_back({"copy_broadcast_transposed_source", {in({4, 3})}, [](const Inputs& x) {
                 Tensor buffer = zeros({2, 3, 4}, kFloat64);
                 buffer.copy_(x[0].t());  // [3, 4] broadcast to [2, 3, 4]
                 return buffer;
               }});
  c.push_back({"copy_over_non_leaf", {in({3, 4}), in({4})}, [](const Inputs& x) {
                 Tensor buffer = x[0] * 3.0;
                 buffer.copy_(x[1]);  // overwrites: x[0] reaches the output only through the product below
                 return buffer * x[0];
               }});

  // --- Edge cases: 0-dim and size-1 tensors, mixed dtypes, negative dims, strided views, ties ----
  c.push_back({"expand_0dim", {in({})}, [](const Inputs& x) {
                 return x[0].expand({3, 4}) * tensor<double>({1, 2, 3, 4});
               }});
  c.push_back({"sum_0dim", {in({})}, [](const Inputs& x) { return sum(x[0] * 3.0); }});
  c.push_back({"sum_all_keepdim", {in({3, 4})}, [](const Inputs& x) { return sum(x[0], {}, true); }});
  c.push_back({"max_all_0dim", {in({})}, [](const Inputs& x) { return max(x[0]); }});
  c.push_back({"max_dim_size1", {in({3, 1})}, [](const Inputs& x) { return max(x[0], 1).values; }});
  c.push_back({"log_softmax_1d", {range({5}, -2, 2)}, [](const Inputs& x) { return log_softmax(x[0], 0); }});
  c.push_back({"stack_0dim", {in({}), in({})}, [](const Inputs& x) { return stack({x[0], x[1] * 2.0}); }});
  c.push_back({"cat_with_empty_piece", {in({2, 3})}, [](const Inputs& x) {
                 return cat({zeros({0, 3}, kFloat64), x[0], zeros({0, 3}, kFloat64)}, 0);
               }});
  c.push_back({"mul_by_int_tensor", {in({3, 4})}, [](const Inputs& x) { return x[0] * idx({1, -2, 3, 4}); }});
  c.push_back({"div_int_tensor_by_tensor", {pos({2, 3})}, [](const Inputs& x) { return div(idx({1, 2, 3}), x[0]); }});
  c.push_back({"pow_int_base_tensor_exponent", {in({2, 3})}, [](const Inputs& x) {
                 return pow(idx({1, 2, 3}), x[0]);
               }});
  c.push_back({"add_f32_operand_promotes",
               {in({3, 4}), in({4})},
               [](const Inputs& x) {
                 return add(x[0].to(kFloat32), x[1]) * x[1];  // f32 + f64 -> f64
               },
               through_f32()});
  c.push_back({"cat_promotes_f32_piece",
               {in({2, 3}), in({1, 3})},
               [](const Inputs& x) {
                 return cat({x[0].to(kFloat32), x[1]}, 0);
               },
               through_f32()});
  c.push_back({"addmm_beta_zero", {in({3, 5}), in({3, 4}), in({4, 5})}, [](const Inputs& x) {
                 return addmm(x[0], x[1], x[2], 0.0, 1.0);
               }});
  c.push_back({"mm_outer_product", {in({3, 1}), in({1, 4})}, [](const Inputs& x) { return mm(x[0], x[1]); }});
  c.push_back({"matmul_1d_1d_slice_step2", {in({8}), in({4})}, [](const Inputs& x) {
                 return matmul(x[0].slice(0, 0, 8, 2), x[1]);
               }});
  c.push_back({"linear_transposed_weight", {in({3, 4}), in({4, 5}), in({5})}, [](const Inputs& x) {
                 return linear(x[0], x[1].t(), x[2]);
               }});
  c.push_back({"embedding_0dim_index", {in({6, 3})}, [](const Inputs& x) {
                 return embedding(x[0], scalar_tensor(2, kInt64));
               }});
  c.push_back({"gather_negative_dim", {in({3, 4})}, [](const Inputs& x) {
                 return gather(x[0], -1, idx({3, 3, 0, 1, 2, 0}, {3, 2}));
               }});
  c.push_back({"index_add_only_source", {in({3, 2})}, [](const Inputs& x) {
                 return index_add(zeros({3, 5}, kFloat64), 1, idx({4, 4}), x[0]);
               }});
  c.push_back({"where_same_tensor_both_branches", {in({3, 4})}, [](const Inputs& x) {
                 return where(gt(x[0], 0.0), x[0], x[0] * -2.0);
               }});
  c.push_back({"where_transposed_condition", {in({4, 3}), in({3, 4})}, [](const Inputs& x) {
                 return where(gt(x[0], 0.0).t(), x[0].t(), x[1]);
               }});
  c.push_back({"cross_entropy_unbatched_none", {range({5}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], scalar_tensor(0, kInt64), ce(Reduction::None));
               }});
  c.push_back({"cross_entropy_all_ignored_sum", {range({3, 4}, -2, 2)}, [ce](const Inputs& x) {
                 return cross_entropy(x[0], idx({-100, -100, -100}), ce(Reduction::Sum)) + x[0].sum();
               }});
  c.push_back({"reshape_expanded_copies", {in({3, 1})}, [](const Inputs& x) {
                 return x[0].expand({3, 4}).reshape({12}) * tensor<double>(std::vector<double>(12, 1.5));
               }});
  c.push_back({"flatten_expanded", {in({1, 4})}, [](const Inputs& x) { return x[0].expand({3, 4}).flatten(); }});
  c.push_back({"narrow_negative_start", {in({5, 4})}, [](const Inputs& x) { return x[0].narrow(1, -3, 2); }});
  c.push_back({"slice_negative_bounds", {in({3, 7})}, [](const Inputs& x) { return x[0].slice(1, -6, -1, 2); }});
  c.push_back({"permute_negative_dims", {in({2, 3, 4})}, [](const Inputs& x) { return x[0].permute({-1, 0, -2}); }});
  c.push_back({"view_splits_strided_dim", {in({4, 6})}, [](const Inputs& x) {
                 return x[0].slice(1, 0, 6, 2).view({2, 2, 3});  // strides (12, 6, 2)
               }});
  c.push_back({"view_merges_contiguous_part_of_strided", {in({4, 3, 2})}, [](const Inputs& x) {
                 return x[0].slice(0, 0, 4, 2).view({2, 6});
               }});
  c.push_back({"reshape_strided_viewable_and_not", {in({4, 6})}, [](const Inputs& x) {
                 Tensor s = x[0].slice(1, 0, 6, 2);
                 return s.reshape({2, 2, 3}) * s.reshape({2, 6}).reshape({2, 2, 3});  // the second copies
               }});
  c.push_back({"unsqueeze_squeeze_transposed", {in({3, 4})}, [](const Inputs& x) {
                 return x[0].t().unsqueeze(1).unsqueeze(0).squeeze(2).squeeze();
               }});
  c.push_back({"expand_transposed_size1", {in({1, 3})}, [](const Inputs& x) { return x[0].t().expand({2, 3, 4}); }});
  c.push_back({"max_dim_over_expanded_ties", {in({1, 4})}, [](const Inputs& x) {
                 return max(x[0].expand({3, 4}), 0).values;  // every column is a three-way tie
               }});
  c.push_back({"max_all_over_expanded_ties", {in({1})}, [](const Inputs& x) { return max(x[0].expand({5})); }});
  c.push_back({"maximum_same_tensor_tie", {in({3, 4})}, [](const Inputs& x) { return maximum(x[0], x[0]); }});
  c.push_back({"minimum_same_tensor_tie", {in({3, 4})}, [](const Inputs& x) { return minimum(x[0], x[0]) * x[0]; }});
  c.push_back({"pow_exponent_two", {in({3, 4})}, [](const Inputs& x) { return pow(x[0], 2.0); }});
  c.push_back(
      {"pow_exponent_one_and_zero", {in({3, 4})}, [](const Inputs& x) { return pow(x[0], 1.0) + pow(x[0], 0.0); }});

  // --- Strided and broadcast gradients reaching the backward kernels ------------------------------
  // The output is permuted (or reduced) after the op, so the op's backward receives a transposed
  // (or stride-0) gradient rather than gradcheck's contiguous direction.
  c.push_back({"exp_grad_transposed", {in({3, 4})}, [](const Inputs& x) { return exp(x[0]).t(); }});
  c.push_back({"mul_grad_transposed", {in({3, 4}), in({4})}, [](const Inputs& x) { return mul(x[0], x[1]).t(); }});
  c.push_back({"mm_grad_transposed", {in({3, 4}), in({4, 5})}, [](const Inputs& x) { return mm(x[0], x[1]).t(); }});
  c.push_back({"mm_grad_broadcast", {in({3, 4}), in({4, 5})}, [](const Inputs& x) { return sum(mm(x[0], x[1])); }});
  c.push_back({"bmm_grad_permuted", {in({2, 3, 4}), in({2, 4, 5})}, [](const Inputs& x) {
                 return bmm(x[0], x[1]).permute({2, 0, 1});
               }});
  c.push_back(
      {"softmax_grad_transposed", {range({3, 4}, -2, 2)}, [](const Inputs& x) { return softmax(x[0], 1).t(); }});
  c.push_back({"log_softmax_grad_broadcast", {range({3, 4}, -2, 2)}, [](const Inputs& x) {
                 return sum(log_softmax(x[0], 1), {0});
               }});
  c.push_back({"cross_entropy_none_grad_strided", {range({4, 5}, -2, 2), in({4, 1})}, [ce](const Inputs& x) {
                 Tensor losses = cross_entropy(x[0], idx({1, 0, 4, 2}), ce(Reduction::None));
                 return cat({losses.unsqueeze(1), x[1]}, 1);  // losses' gradient is a stride-2 column
               }});
  c.push_back({"max_dim_grad_broadcast", {in({3, 4})}, [](const Inputs& x) { return sum(max(x[0], 0).values); }});
  c.push_back({"index_select_grad_transposed", {in({5, 3})}, [](const Inputs& x) {
                 return index_select(x[0], 0, idx({4, 0, 2, 0})).t();
               }});
  c.push_back({"gather_grad_broadcast", {in({3, 4})}, [](const Inputs& x) {
                 return sum(gather(x[0], 1, idx({3, 3, 0, 1, 2, 0}, {3, 2})), {1});
               }});
  c.push_back({"where_grad_transposed", {in({3, 4}), in({3, 4})}, [](const Inputs& x) {
                 return where(gt(x[0], x[1]), x[0], x[1]).t();
               }});

  // --- Large tensors from small leaves: the kernels take their multi-threaded paths ---------------
  // Only the small leaves are perturbed, so the finite differences stay cheap.
  c.push_back({"parallel_pointwise_and_reduce", {in({4}), in({1})}, [](const Inputs& x) {
                 Tensor ramp = linspace(-1.0, 1.0, 20000, kFloat64).unsqueeze(1);  // [20000, 1]
                 Tensor big = tanh(x[0].expand({20000, 4}) * ramp + x[1]);         // 80000 elements
                 return mean(big * big, {0});
               }});
  c.push_back({"parallel_softmax_rows", {range({4}, -2, 2)}, [](const Inputs& x) {
                 Tensor ramp = linspace(0.5, 2.0, 3000, kFloat64).unsqueeze(1);
                 return sum(log_softmax(x[0].expand({3000, 4}) * ramp, 1) * ramp, {0});
               }});
  c.push_back({"parallel_cross_entropy_rows", {range({5}, -2, 2)}, [ce](const Inputs& x) {
                 std::vector<int64_t> targets(3000);
                 for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int64_t>(i % 5);
                 Tensor ramp = linspace(0.5, 2.0, 3000, kFloat64).unsqueeze(1);
                 return cross_entropy(x[0].expand({3000, 5}) * ramp, idx(targets), ce(Reduction::Mean, -100, 0.1));
               }});
  c.push_back({"parallel_index_select_rows", {in({6, 3})}, [](const Inputs& x) {
                 std::vector<int64_t> rows(20000);
                 for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>((i * 7) % 6);
                 Tensor ramp = linspace(-1.0, 1.0, 20000, kFloat64).unsqueeze(1);
                 return sum(index_select(x[0], 0, idx(rows)) * ramp, {0});
               }});

  return c;
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

class Gradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input& input = c.inputs[i];
    inputs.push_back(testing::leaf(input.shape, seed_for(c.name, i), input.low, input.high));
  }
  autograd::GradcheckResult result = autograd::gradcheck(c.fn, inputs, c.options);
  EXPECT_TRUE(result.ok) << result.report << "max abs error " << result.max_abs_error;
}

INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace tapegrad
