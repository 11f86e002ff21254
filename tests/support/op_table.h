// The op x backend x dtype table: one row per differentiable op, walked by tests/ops/test_op_table.cpp
// with one parameterised test per check (gradcheck in f64, values against the row's reference
// formula in double for each dtype, CPU/CUDA parity forward and backward for each dtype).
//
// A row names the op, the shapes and value ranges of its floating inputs, the op itself (any
// constant it needs, such as class targets, is made on its first input's device), and its
// reference: the output values in double from the input values (row-major, as doubles).
// Adding an op is one more row in op_rows().
//
// A row's name is also its gradcheck seed (the draws of tests/autograd/test_gradcheck.cpp's case
// of the same name), so a row and that table's plain case of one op were the same check: the plain
// cases live here now, and test_gradcheck keeps the broadcast, strided and option variants.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "support/random_values.h"
#include "support/reference.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad::testing::op_table {

using Inputs = std::vector<Tensor>;
using Values = std::vector<std::vector<double>>;  // each input's values, row-major

// One floating input: its shape and the range its values are drawn from (uniform on [low, high)).
struct Input {
  Shape shape;
  double low = -1.0, high = 1.0;
};

struct OpRow {
  std::string name;  // letters, digits and underscores (part of each test's name)
  std::vector<Input> inputs;
  std::function<Tensor(const Inputs&)> op;
  std::function<std::vector<double>(const Values&)> reference;
  std::vector<DType> dtypes = {kFloat32, kFloat64};  // on the CPU and on CUDA
  double f32_rtol = 1e-5;                            // the value check's tolerance in float32
};

// A stable seed per (row, input), the one test_gradcheck.cpp draws its leaves with (FNV-1a).
inline uint64_t seed_for(const std::string& name, size_t input) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h + 7919 * input;
}

// The row's inputs in `dtype` on `device`, drawn from its seeds (every dtype the same numbers, rounded).
inline Inputs make_inputs(const OpRow& row, DType dtype, Device device = kCPU) {
  Inputs x;
  for (size_t i = 0; i < row.inputs.size(); ++i) {
    const Input& in = row.inputs[i];
    x.push_back(uniform(in.shape, dtype, seed_for(row.name, i), in.low, in.high).to(device));
  }
  return x;
}

inline Input in(Shape shape) {
  return {std::move(shape), -1.0, 1.0};
}
inline Input pos(Shape shape) {  // strictly positive: log, sqrt, divisors, pow bases
  return {std::move(shape), 0.5, 2.0};
}
inline Input range(Shape shape, double low, double high) {
  return {std::move(shape), low, high};
}

// Reference builders: the elementwise formula f applied to input 0 (and 1, same shape).
inline std::function<std::vector<double>(const Values&)> unary(double (*f)(double)) {
  return [f](const Values& v) { return reference::map_ref(v[0], f); };
}
inline std::function<std::vector<double>(const Values&)> binary(double (*f)(double, double)) {
  return [f](const Values& v) {
    std::vector<double> r(v[0].size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = f(v[0][i], v[1][i]);
    return r;
  };
}

// Class targets for a [rows, classes] input, on its device.
inline Tensor class_targets(const std::vector<int64_t>& t, const Tensor& like) {
  return tensor<int64_t>(t, {static_cast<int64_t>(t.size())}).to(like.device());
}

// y = (x - mean) / sqrt(var + eps) * w + b over rows of `cols`, the variance biased.
inline std::vector<double> layer_norm_rows_ref(const Values& v, int64_t cols, double eps) {
  std::vector<double> out(v[0].size());
  for (int64_t r = 0; r < static_cast<int64_t>(v[0].size()) / cols; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += v[0][static_cast<size_t>(r * cols + c)];
    mean /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c)
      var += (v[0][static_cast<size_t>(r * cols + c)] - mean) * (v[0][static_cast<size_t>(r * cols + c)] - mean);
    var /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] =
          (v[0][static_cast<size_t>(r * cols + c)] - mean) / std::sqrt(var + eps) * v[1][static_cast<size_t>(c)] +
          v[2][static_cast<size_t>(c)];
  }
  return out;
}

// y = x / sqrt(mean(x^2) + eps) * w over rows of `cols`.
inline std::vector<double> rms_norm_rows_ref(const Values& v, int64_t cols, double eps) {
  std::vector<double> out(v[0].size());
  for (int64_t r = 0; r < static_cast<int64_t>(v[0].size()) / cols; ++r) {
    double mean_square = 0;
    for (int64_t c = 0; c < cols; ++c)
      mean_square += v[0][static_cast<size_t>(r * cols + c)] * v[0][static_cast<size_t>(r * cols + c)];
    mean_square /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] =
          v[0][static_cast<size_t>(r * cols + c)] / std::sqrt(mean_square + eps) * v[1][static_cast<size_t>(c)];
  }
  return out;
}

inline double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// The table. Shapes and ranges of the rows that share a name with a test_gradcheck.cpp case are
// that case's.
inline std::vector<OpRow> op_rows() {
  using reference::matmul_ref;
  using reference::mean_ref;
  using reference::softmax_rows_ref;
  using reference::sum_ref;
  std::vector<OpRow> t;
  // --- Pointwise unary ----------------------------------------------------------------------
  t.push_back({"neg", {in({3, 4})}, [](const Inputs& x) { return neg(x[0]); }, unary([](double a) { return -a; })});
  t.push_back(
      {"exp", {in({3, 4})}, [](const Inputs& x) { return exp(x[0]); }, unary([](double a) { return std::exp(a); })});
  t.push_back(
      {"log", {pos({3, 4})}, [](const Inputs& x) { return log(x[0]); }, unary([](double a) { return std::log(a); })});
  t.push_back({"tanh", {range({3, 4}, -2, 2)}, [](const Inputs& x) { return tanh(x[0]); }, unary([](double a) {
                 return std::tanh(a);
               })});
  t.push_back({"sigmoid", {range({4, 3}, -3, 3)}, [](const Inputs& x) { return sigmoid(x[0]); }, unary([](double a) {
                 return 1.0 / (1.0 + std::exp(-a));
               })});
  t.push_back({"relu", {in({3, 5})}, [](const Inputs& x) { return relu(x[0]); }, unary([](double a) {
                 return a > 0 ? a : 0.0;
               })});
  t.push_back({"gelu", {range({3, 4}, -3, 3)}, [](const Inputs& x) { return gelu(x[0]); }, unary(gelu_ref)});
  t.push_back({"silu", {range({3, 4}, -6, 6)}, [](const Inputs& x) { return silu(x[0]); }, unary([](double a) {
                 return a / (1.0 + std::exp(-a));
               })});
  t.push_back({"leaky_relu", {in({3, 5})}, [](const Inputs& x) { return leaky_relu(x[0]); }, unary([](double a) {
                 return a > 0 ? a : 0.01 * a;
               })});
  t.push_back({"softplus", {range({3, 4}, -4, 4)}, [](const Inputs& x) { return softplus(x[0]); }, unary([](double a) {
                 return std::log1p(std::exp(a));
               })});
  t.push_back({"elu", {range({3, 4}, -3, 2)}, [](const Inputs& x) { return elu(x[0]); }, unary([](double a) {
                 return a > 0 ? a : std::expm1(a);
               })});
  t.push_back({"abs", {in({2, 3, 4})}, [](const Inputs& x) { return abs(x[0]); }, unary([](double a) {
                 return std::fabs(a);
               })});
  t.push_back(
      {"sqrt", {pos({5})}, [](const Inputs& x) { return sqrt(x[0]); }, unary([](double a) { return std::sqrt(a); })});
  t.push_back({"rsqrt", {pos({2, 3})}, [](const Inputs& x) { return rsqrt(x[0]); }, unary([](double a) {
                 return 1.0 / std::sqrt(a);
               })});
  t.push_back(
      {"square", {in({6})}, [](const Inputs& x) { return square(x[0]); }, unary([](double a) { return a * a; })});
  // --- Pointwise binary ---------------------------------------------------------------------
  t.push_back(
      {"add", {in({3, 4}), in({3, 4})}, [](const Inputs& x) { return add(x[0], x[1]); }, binary([](double a, double b) {
         return a + b;
       })});
  t.push_back(
      {"sub", {in({3, 4}), in({3, 4})}, [](const Inputs& x) { return sub(x[0], x[1]); }, binary([](double a, double b) {
         return a - b;
       })});
  t.push_back(
      {"mul", {in({3, 4}), in({3, 4})}, [](const Inputs& x) { return mul(x[0], x[1]); }, binary([](double a, double b) {
         return a * b;
       })});
  t.push_back({"div",
               {in({3, 4}), pos({3, 4})},
               [](const Inputs& x) { return div(x[0], x[1]); },
               binary([](double a, double b) { return a / b; })});
  t.push_back({"pow_tensor_tensor",
               {pos({3, 4}), in({3, 4})},
               [](const Inputs& x) { return pow(x[0], x[1]); },
               binary([](double a, double b) { return std::pow(a, b); })});
  t.push_back({"maximum",
               {in({3, 4}), in({3, 4})},
               [](const Inputs& x) { return maximum(x[0], x[1]); },
               binary([](double a, double b) { return std::max(a, b); })});
  t.push_back({"minimum",
               {in({3, 4}), in({3, 4})},
               [](const Inputs& x) { return minimum(x[0], x[1]); },
               binary([](double a, double b) { return std::min(a, b); })});
  // --- Reductions ---------------------------------------------------------------------------
  t.push_back({"sum_all",
               {in({3, 4})},
               [](const Inputs& x) { return sum(x[0]); },
               [](const Values& v) {
                 return sum_ref(v[0], {3, 4}, {});
               }});
  t.push_back({"sum_dim",
               {in({2, 3, 4})},
               [](const Inputs& x) { return sum(x[0], {1}); },
               [](const Values& v) {
                 return sum_ref(v[0], {2, 3, 4}, {1});
               }});
  t.push_back({"mean_all",
               {in({3, 4})},
               [](const Inputs& x) { return mean(x[0]); },
               [](const Values& v) {
                 return mean_ref(v[0], {3, 4}, {});
               }});
  t.push_back({"mean_dim",
               {in({2, 3, 4})},
               [](const Inputs& x) { return mean(x[0], {0}); },
               [](const Values& v) {
                 return mean_ref(v[0], {2, 3, 4}, {0});
               }});
  t.push_back({"var_all_unbiased",
               {in({3, 4})},
               [](const Inputs& x) { return var(x[0]); },
               [](const Values& v) {
                 return reference::var_ref(v[0], {3, 4}, {}, 1.0);
               }});
  // --- Products -----------------------------------------------------------------------------
  t.push_back({"mm",
               {in({3, 4}), in({4, 5})},
               [](const Inputs& x) { return mm(x[0], x[1]); },
               [](const Values& v) { return matmul_ref(v[0], v[1], 3, 4, 5); }});
  t.push_back({"linear",
               {in({3, 4}), in({5, 4}), in({5})},
               [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
               [](const Values& v) {
                 std::vector<double> y = matmul_ref(v[0], reference::transpose_ref(v[1], 5, 4), 3, 4, 5);
                 for (size_t i = 0; i < y.size(); ++i) y[i] += v[2][i % 5];
                 return y;
               }});
  // --- Softmax and losses -------------------------------------------------------------------
  t.push_back({"softmax_last_dim",
               {range({3, 5}, -2, 2)},
               [](const Inputs& x) { return softmax(x[0], -1); },
               [](const Values& v) { return softmax_rows_ref(v[0], 3, 5, false); }});
  t.push_back({"log_softmax_last_dim",
               {range({3, 5}, -2, 2)},
               [](const Inputs& x) { return log_softmax(x[0], -1); },
               [](const Values& v) { return softmax_rows_ref(v[0], 3, 5, true); }});
  t.push_back({"cross_entropy_mean",
               {range({4, 5}, -2, 2)},
               [](const Inputs& x) {
                 return cross_entropy(x[0], class_targets({1, 0, 4, 2}, x[0]));
               },
               [](const Values& v) {
                 std::vector<double> rows = reference::cross_entropy_rows_ref(v[0], 4, 5, {1, 0, 4, 2}, -100, 0.0);
                 double total = 0;
                 for (double r : rows) total += r;
                 return std::vector<double>{total / 4.0};
               }});
  // --- Normalisation ------------------------------------------------------------------------
  t.push_back({"layer_norm_affine",
               {range({3, 5}, -2, 2), range({5}, 0.5, 1.5), in({5})},
               [](const Inputs& x) { return layer_norm(x[0], {5}, x[1], x[2]); },
               [](const Values& v) { return layer_norm_rows_ref(v, 5, 1e-5); }});
  t.push_back({"rms_norm_weight",
               {range({3, 5}, -2, 2), range({5}, 0.5, 1.5)},
               [](const Inputs& x) { return rms_norm(x[0], {5}, x[1], 1e-6); },
               [](const Values& v) { return rms_norm_rows_ref(v, 5, 1e-6); }});
  return t;
}

}  // namespace tapegrad::testing::op_table
