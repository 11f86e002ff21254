// Forward values of every op, checked against independent references (hand loops over std::vector, hand-computed constants).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace tapegrad {
namespace {

using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// Reference helpers: everything here is plain C++ over std::vector, independent of tapegrad.
// ---------------------------------------------------------------------------------------------

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Uniform values from the test's own generator (not tapegrad's Philox).
std::vector<double> uniform_values(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

std::vector<double> round_f32(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

// Uniform values already representable in `dt` (so an f32 tensor holds exactly these numbers).
std::vector<double> data_for(DType dt, size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v = uniform_values(n, seed, lo, hi);
  return dt == kFloat32 ? round_f32(v) : v;
}

Tensor make(const std::vector<double>& v, const Shape& shape, DType dt = kFloat64) {
  return tensor<double>(v, shape, TensorOptions(dt));
}

Tensor make_i64(const std::vector<int64_t>& v, const Shape& shape = {}) { return tensor<int64_t>(v, shape); }
Tensor make_i32(const std::vector<int32_t>& v, const Shape& shape = {}) { return tensor<int32_t>(v, shape); }

double tol_for(DType dt) { return dt == kFloat32 ? 3e-6 : 1e-12; }

// Compares a tensor's values with a reference: |got - want| <= atol + rtol |want|; NaN must match NaN
// and infinities must match exactly. Stops after a few reported mismatches.
void expect_values(const Tensor& t, const std::vector<double>& want, double rtol = 1e-12, double atol = 1e-12,
                   const std::string& what = "") {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 8; ++i) {
    bool ok;
    if (std::isnan(want[i])) {
      ok = std::isnan(got[i]);
    } else if (std::isinf(want[i])) {
      ok = got[i] == want[i];
    } else {
      ok = std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    }
    if (!ok) {
      ++reported;
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
}

// Row-major multi-index of flat position i in `shape`.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

Shape broadcast_ref_shape(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// v (of `shape`) broadcast to `out`, row-major.
std::vector<double> broadcast_to_ref(const std::vector<double>& v, const Shape& shape, const Shape& out) {
  int64_t n = numel_of(out);
  std::vector<double> r(static_cast<size_t>(n));
  const size_t lead = out.size() - shape.size();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> idx = unravel(i, out);
    int64_t src = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t at = shape[d] == 1 ? 0 : idx[d + lead];
      src += at * stride;
      stride *= shape[d];
    }
    r[static_cast<size_t>(i)] = v[static_cast<size_t>(src)];
  }
  return r;
}

std::vector<double> binary_ref(const std::vector<double>& a, const Shape& as, const std::vector<double>& b,
                               const Shape& bs, const std::function<double(double, double)>& f) {
  Shape out = broadcast_ref_shape(as, bs);
  std::vector<double> ea = broadcast_to_ref(a, as, out), eb = broadcast_to_ref(b, bs, out);
  std::vector<double> r(ea.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = f(ea[i], eb[i]);
  return r;
}

std::vector<double> map_ref(const std::vector<double>& v, const std::function<double(double)>& f) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f(v[i]);
  return r;
}

// For a reduction of `shape` over the dims marked in `reduce`: the flat input indices that land in
// each output element (outputs in row-major order; members in increasing input order).
std::vector<std::vector<int64_t>> reduce_groups(const Shape& shape, const std::vector<bool>& reduce) {
  Shape kept;
  for (size_t d = 0; d < shape.size(); ++d) kept.push_back(reduce[d] ? 1 : shape[d]);
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(numel_of(kept)));
  for (int64_t i = 0; i < numel_of(shape); ++i) {
    std::vector<int64_t> idx = unravel(i, shape);
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o = o * kept[d] + (reduce[d] ? 0 : idx[d]);
    groups[static_cast<size_t>(o)].push_back(i);
  }
  return groups;
}

std::vector<bool> mask_of(size_t ndim, const std::vector<int64_t>& dims) {
  std::vector<bool> m(ndim, dims.empty());
  for (int64_t d : dims) m[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(ndim) : d)] = true;
  return m;
}

std::vector<double> sum_ref(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& dims) {
  std::vector<double> r;
  for (const auto& g : reduce_groups(shape, mask_of(shape.size(), dims))) {
    double s = 0;
    for (int64_t i : g) s += v[static_cast<size_t>(i)];
    r.push_back(s);
  }
  return r;
}

std::vector<double> mean_ref(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& dims) {
  std::vector<double> r;
  for (const auto& g : reduce_groups(shape, mask_of(shape.size(), dims))) {
    double s = 0;
    for (int64_t i : g) s += v[static_cast<size_t>(i)];
    r.push_back(s / static_cast<double>(g.size()));
  }
  return r;
}

std::vector<double> var_ref(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& dims,
                            double correction) {
  std::vector<double> r;
  for (const auto& g : reduce_groups(shape, mask_of(shape.size(), dims))) {
    double s = 0;
    for (int64_t i : g) s += v[static_cast<size_t>(i)];
    double m = s / static_cast<double>(g.size()), q = 0;
    for (int64_t i : g) q += (v[static_cast<size_t>(i)] - m) * (v[static_cast<size_t>(i)] - m);
    r.push_back(q / (static_cast<double>(g.size()) - correction));
  }
  return r;
}

// Max (or min) along one dim: values and the first position along the dim where it occurs.
void extreme_ref(const std::vector<double>& v, const Shape& shape, int64_t dim, bool is_max, std::vector<double>& vals,
                 std::vector<double>& idx) {
  vals.clear();
  idx.clear();
  for (const auto& g : reduce_groups(shape, mask_of(shape.size(), {dim}))) {
    double best = v[static_cast<size_t>(g[0])];
    size_t at = 0;
    for (size_t k = 1; k < g.size(); ++k) {
      double c = v[static_cast<size_t>(g[k])];
      if (is_max ? c > best : c < best) {
        best = c;
        at = k;
      }
    }
    vals.push_back(best);
    idx.push_back(static_cast<double>(at));
  }
}

// C[n, m] = A[n, k] B[k, m], triple loop.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t n, int64_t k,
                               int64_t m) {
  std::vector<double> c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * m + j)];
      c[static_cast<size_t>(i * m + j)] = s;
    }
  return c;
}

// The transpose of a row-major [r, c] matrix.
std::vector<double> transpose_ref(const std::vector<double>& v, int64_t r, int64_t c) {
  std::vector<double> t(v.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[static_cast<size_t>(j * r + i)] = v[static_cast<size_t>(i * c + j)];
  return t;
}

// Rows [r0, r0 + nr) step rs and columns [c0, c0 + nc) step cs of a row-major [*, cols] matrix.
std::vector<double> submatrix_ref(const std::vector<double>& v, int64_t cols, int64_t r0, int64_t nr, int64_t rs,
                                  int64_t c0, int64_t nc, int64_t cs) {
  std::vector<double> out;
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) out.push_back(v[static_cast<size_t>((r0 + i * rs) * cols + c0 + j * cs)]);
  return out;
}

std::vector<double> slice_ref(const std::vector<double>& v, size_t begin, size_t count) {
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                             v.begin() + static_cast<std::ptrdiff_t>(begin + count));
}

std::vector<double> concat_ref(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Softmax of each row of a row-major [rows, cols] matrix, computed in long double.
std::vector<double> softmax_rows_ref(const std::vector<double>& v, int64_t rows, int64_t cols, bool log) {
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    long double m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::max<long double>(m, v[static_cast<size_t>(r * cols + c)]);
    long double total = 0;
    for (int64_t c = 0; c < cols; ++c) total += std::exp(static_cast<long double>(v[static_cast<size_t>(r * cols + c)]) - m);
    for (int64_t c = 0; c < cols; ++c) {
      long double x = static_cast<long double>(v[static_cast<size_t>(r * cols + c)]) - m;
      out[static_cast<size_t>(r * cols + c)] =
          static_cast<double>(log ? x - std::log(total) : std::exp(x) / total);
    }
  }
  return out;
}

// Per-row cross-entropy with label smoothing e: (1 - e) * (-log p_t) + e * mean_c(-log p_c).
// Ignored rows give 0.
std::vector<double> cross_entropy_rows_ref(const std::vector<double>& z, int64_t rows, int64_t classes,
                                           const std::vector<int64_t>& target, int64_t ignore, double e) {
  std::vector<double> logp = softmax_rows_ref(z, rows, classes, true);
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    if (target[static_cast<size_t>(r)] == ignore) {
      out.push_back(0.0);
      continue;
    }
    double nll = -logp[static_cast<size_t>(r * classes + target[static_cast<size_t>(r)])];
    double smooth = 0;
    for (int64_t c = 0; c < classes; ++c) smooth += -logp[static_cast<size_t>(r * classes + c)];
    smooth /= static_cast<double>(classes);
    out.push_back((1.0 - e) * nll + e * smooth);
  }
  return out;
}

// Forces the OpenMP paths on even when the machine reports one core; restores the count after.
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int threads = 4) : previous_(get_num_threads()) { set_num_threads(std::max(threads, previous_)); }
  ~ThreadsGuard() { set_num_threads(previous_); }

 private:
  int previous_;
};

// ---------------------------------------------------------------------------------------------
// Unary ops
// ---------------------------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.05, 20},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 20},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1.0 / std::sqrt(x); }, 0.05, 20},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -5, 5},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -10, 10},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }, -5, 5},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -3, 3},
  };
}

TEST(UnaryValues, EveryOpMatchesStdMathInF32AndF64) {
  uint32_t seed = 10;
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      std::vector<double> v = data_for(dt, 60, seed++, c.lo, c.hi);
      Tensor x = make(v, {6, 10}, dt);
      Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dt) << c.name;
      EXPECT_EQ(y.sizes(), (Shape{6, 10})) << c.name;
      expect_values(y, map_ref(v, c.ref), tol_for(dt), dt == kFloat32 ? 1e-6 : 1e-14,
                    std::string(c.name) + " " + dtype_name(dt));
    }
  }
}

TEST(UnaryValues, KnownConstants) {
  for (DType dt : {kFloat32, kFloat64}) {
    double rt = dt == kFloat32 ? 1e-6 : 1e-14;
    expect_values(exp(make({0.0, 1.0, -1.0}, {3}, dt)), {1.0, 2.718281828459045, 0.36787944117144233}, rt, 0);
    expect_values(log(make({1.0, 2.718281828459045, 0.5}, {3}, dt)), {0.0, 1.0, -0.6931471805599453}, rt, 1e-7);
    expect_values(sqrt(make({0.0, 4.0, 2.0}, {3}, dt)), {0.0, 2.0, 1.4142135623730951}, rt, 0);
    expect_values(rsqrt(make({0.25, 4.0, 1.0}, {3}, dt)), {2.0, 0.5, 1.0}, rt, 0);
    expect_values(tanh(make({0.0, 0.5, -20.0}, {3}, dt)), {0.0, 0.46211715726000974, -1.0}, rt, 0);
    expect_values(sigmoid(make({0.0, 2.0, -100.0, 100.0}, {4}, dt)), {0.5, 0.8807970779778823, 0.0, 1.0}, rt, 1e-30);
    expect_values(relu(make({-0.5, 0.0, 0.5}, {3}, dt)), {0.0, 0.0, 0.5}, 0, 0);
    expect_values(gelu(make({0.0, 1.0, -1.0, 2.0}, {4}, dt)),
                  {0.0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416}, rt, 1e-7);
    expect_values(square(make({-3.0, 0.5}, {2}, dt)), {9.0, 0.25}, 0, 0);
    expect_values(abs(make({-3.0, 0.0, 2.5}, {3}, dt)), {3.0, 0.0, 2.5}, 0, 0);
    expect_values(neg(make({-3.0, 0.0, 2.5}, {3}, dt)), {3.0, 0.0, -2.5}, 0, 0);
  }
}

TEST(UnaryValues, SpecialValues) {
  Tensor x = make({0.0, -1.0, kInf, -kInf, kNaN}, {5});
  expect_values(log(x), {-kInf, kNaN, kInf, kNaN, kNaN});
  expect_values(sqrt(x), {0.0, kNaN, kInf, kNaN, kNaN});
  expect_values(exp(x), {1.0, std::exp(-1.0), kInf, 0.0, kNaN});
  expect_values(tanh(x), {0.0, std::tanh(-1.0), 1.0, -1.0, kNaN});
  expect_values(relu(make({0.0, -1.0, kInf, -kInf}, {4})), {0.0, 0.0, kInf, 0.0}, 0, 0);
}

TEST(UnaryValues, IntegerInputs) {
  Tensor xi = make_i32({1, -2, 3, 0});
  Tensor n = neg(xi), a = abs(xi), r = relu(xi), s = square(xi);
  EXPECT_EQ(n.dtype(), kInt32);
  EXPECT_EQ(a.dtype(), kInt32);
  EXPECT_EQ(r.dtype(), kInt32);
  EXPECT_EQ(s.dtype(), kInt32);
  EXPECT_EQ(n.tolist<int32_t>(), (std::vector<int32_t>{-1, 2, -3, 0}));
  EXPECT_EQ(a.tolist<int32_t>(), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(r.tolist<int32_t>(), (std::vector<int32_t>{1, 0, 3, 0}));
  EXPECT_EQ(s.tolist<int32_t>(), (std::vector<int32_t>{1, 4, 9, 0}));
  // Transcendentals of integers are float32, like PyTorch.
  Tensor e = exp(make_i64({0, 1}));
  EXPECT_EQ(e.dtype(), kFloat32);
  expect_values(e, {1.0, 2.718281828459045}, 1e-6, 0);
  Tensor q = sqrt(make_i64({4, 9}));
  EXPECT_EQ(q.dtype(), kFloat32);
  expect_values(q, {2.0, 3.0});
}

TEST(UnaryValues, MethodFormsMatchFreeFunctions) {
  std::vector<double> v = uniform_values(12, 3, 0.1, 2.0);
  Tensor x = make(v, {3, 4});
  expect_values(x.exp(), map_ref(v, [](double a) { return std::exp(a); }));
  expect_values(x.log(), map_ref(v, [](double a) { return std::log(a); }));
  expect_values(x.sqrt(), map_ref(v, [](double a) { return std::sqrt(a); }));
  expect_values(x.tanh(), map_ref(v, [](double a) { return std::tanh(a); }));
  expect_values(x.sigmoid(), map_ref(v, [](double a) { return 1 / (1 + std::exp(-a)); }));
  expect_values((-x).relu(), std::vector<double>(12, 0.0));
  expect_values((-x).abs(), v);
  expect_values(x.pow(3.0), map_ref(v, [](double a) { return a * a * a; }));
}

// ---------------------------------------------------------------------------------------------
// Binary ops, broadcasting, scalar forms
// ---------------------------------------------------------------------------------------------

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;  // the operands' range (pow needs a positive base)
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }, -2, 2},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
       [](double a, double b) { return a + 2.5 * b; }, -2, 2},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }, -2, 2},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -0.5); },
       [](double a, double b) { return a + 0.5 * b; }, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }, -2, 2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, 0.5, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); },
       0.25, 2.5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -2, 2},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }, -2, 2},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }, -2, 2},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }, -2, 2},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 3},
  };
}

TEST(BinaryValues, BroadcastingShapes) {
  const std::vector<std::pair<Shape, Shape>> shape_pairs = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}}, {{2, 1}, {1, 3}}, {{2, 3}, {}}, {{}, {2, 3}},
      {{}, {}},         {{4, 1, 3}, {2, 1}}, {{2, 3, 4}, {3, 1}},
  };
  uint32_t seed = 100;
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {kFloat64, kFloat32}) {
      for (const auto& [as, bs] : shape_pairs) {
        std::vector<double> av = data_for(dt, static_cast<size_t>(numel_of(as)), seed++, c.lo, c.hi);
        std::vector<double> bv = data_for(dt, static_cast<size_t>(numel_of(bs)), seed++, c.lo, c.hi);
        Tensor a = make(av, as.empty() ? Shape{1} : as, dt), b = make(bv, bs.empty() ? Shape{1} : bs, dt);
        if (as.empty()) a = a.reshape({});
        if (bs.empty()) b = b.reshape({});
        Tensor out = c.op(a, b);
        std::string what = std::string(c.name) + " " + dtype_name(dt) + " " + shape_str(as) + " with " + shape_str(bs);
        EXPECT_EQ(out.sizes(), broadcast_ref_shape(as, bs)) << what;
        EXPECT_EQ(out.dtype(), dt) << what;
        expect_values(out, binary_ref(av, as, bv, bs, c.ref), tol_for(dt), dt == kFloat32 ? 1e-6 : 1e-14, what);
      }
    }
  }
}

TEST(BinaryValues, MaximumMinimumPropagateNaN) {
  Tensor a = make({kNaN, 1.0, 2.0}, {3});
  Tensor b = make({0.0, kNaN, 3.0}, {3});
  expect_values(maximum(a, b), {kNaN, kNaN, 3.0});
  expect_values(minimum(a, b), {kNaN, kNaN, 2.0});
}

TEST(BinaryValues, ScalarForms) {
  std::vector<double> v = uniform_values(6, 7, 0.5, 2.0);
  for (DType dt : {kFloat64, kFloat32}) {
    std::vector<double> w = dt == kFloat32 ? round_f32(v) : v;
    Tensor x = make(w, {2, 3}, dt);
    double rt = tol_for(dt);
    auto check = [&](const Tensor& t, const std::function<double(double)>& f, const char* what) {
      EXPECT_EQ(t.dtype(), dt) << what;
      EXPECT_EQ(t.sizes(), (Shape{2, 3})) << what;
      expect_values(t, map_ref(w, f), rt, 1e-7, what);
    };
    check(add(x, 2.5), [](double a) { return a + 2.5; }, "add scalar");
    check(sub(x, 2.5), [](double a) { return a - 2.5; }, "sub scalar");
    check(mul(x, -3.0), [](double a) { return a * -3.0; }, "mul scalar");
    check(div(x, 4.0), [](double a) { return a / 4.0; }, "div scalar");
    check(pow(x, 3.0), [](double a) { return a * a * a; }, "pow 3");
    check(pow(x, 2.0), [](double a) { return a * a; }, "pow 2");
    check(pow(x, 0.5), [](double a) { return std::sqrt(a); }, "pow 0.5");
    check(pow(x, -1.0), [](double a) { return 1.0 / a; }, "pow -1");
    check(pow(2.0, x), [](double a) { return std::pow(2.0, a); }, "pow base 2");
    check(maximum(x, 1.0), [](double a) { return std::max(a, 1.0); }, "maximum scalar");
    check(minimum(x, 1.0), [](double a) { return std::min(a, 1.0); }, "minimum scalar");
    check(x + 1.5, [](double a) { return a + 1.5; }, "x + s");
    check(1.5 + x, [](double a) { return 1.5 + a; }, "s + x");
    check(x - 1.5, [](double a) { return a - 1.5; }, "x - s");
    check(1.5 - x, [](double a) { return 1.5 - a; }, "s - x");
    check(x * 3.0, [](double a) { return a * 3.0; }, "x * s");
    check(3.0 * x, [](double a) { return 3.0 * a; }, "s * x");
    check(x / 8.0, [](double a) { return a / 8.0; }, "x / s");
    check(8.0 / x, [](double a) { return 8.0 / a; }, "s / x");
    check(-x, [](double a) { return -a; }, "-x");
  }
}

TEST(BinaryValues, ZeroDimScalarTensors) {
  Tensor s = scalar_tensor(3.0, kFloat64);
  EXPECT_EQ(s.dim(), 0);
  Tensor t = scalar_tensor(-0.5, kFloat64);
  Tensor r = s * t + s;
  EXPECT_EQ(r.dim(), 0);
  EXPECT_DOUBLE_EQ(r.item(), 1.5);
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(s - x, {2, 1, 0, -1, -2, -3});
  expect_values(x / s, {1.0 / 3, 2.0 / 3, 1, 4.0 / 3, 5.0 / 3, 2});
}

TEST(BinaryValues, TypePromotion) {
  Tensor i64 = make_i64({1, 2, 3});
  Tensor i32 = make_i32({10, 20, 30});
  Tensor f32 = make({0.5, 0.25, -1.0}, {3}, kFloat32);
  Tensor f64 = make({0.5, 0.25, -1.0}, {3}, kFloat64);

  Tensor r1 = i64 + f32;
  EXPECT_EQ(r1.dtype(), kFloat32);
  expect_values(r1, {1.5, 2.25, 2.0});

  Tensor r2 = i32 + i64;
  EXPECT_EQ(r2.dtype(), kInt64);
  EXPECT_EQ(r2.tolist<int64_t>(), (std::vector<int64_t>{11, 22, 33}));

  Tensor r3 = div(make_i32({7, -7, 1}), make_i32({2, 2, 3}));
  EXPECT_EQ(r3.dtype(), kFloat32);
  expect_values(r3, {3.5, -3.5, 1.0 / 3.0}, 1e-7, 0);

  Tensor r4 = i64 * 2.5;
  EXPECT_EQ(r4.dtype(), kFloat32);
  expect_values(r4, {2.5, 5.0, 7.5});

  Tensor r5 = f32 * 2.0;
  EXPECT_EQ(r5.dtype(), kFloat32);
  expect_values(r5, {1.0, 0.5, -2.0});

  Tensor r6 = i64 * 2.0;  // an integral scalar keeps the integer dtype
  EXPECT_EQ(r6.dtype(), kInt64);
  EXPECT_EQ(r6.tolist<int64_t>(), (std::vector<int64_t>{2, 4, 6}));

  Tensor r7 = f32 + f64;
  EXPECT_EQ(r7.dtype(), kFloat64);
  expect_values(r7, {1.0, 0.5, -2.0});

  Tensor r8 = make_i64({7, 8}) / 2.0;  // true division even with an integral scalar
  EXPECT_EQ(r8.dtype(), kFloat32);
  expect_values(r8, {3.5, 4.0});

  Tensor r9 = i32 - i32;
  EXPECT_EQ(r9.dtype(), kInt32);
  EXPECT_EQ(r9.tolist<int32_t>(), (std::vector<int32_t>{0, 0, 0}));

  Tensor r10 = 1.0 / make_i64({2, 4});
  EXPECT_EQ(r10.dtype(), kFloat32);
  expect_values(r10, {0.5, 0.25});

  Tensor r11 = make_i32({3, 5}) + 0.5;
  EXPECT_EQ(r11.dtype(), kFloat32);
  expect_values(r11, {3.5, 5.5});

  EXPECT_EQ(promote_types(kInt32, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kFloat64, kInt64), kFloat64);
}

// A non-integral scalar with an integer tensor gives float32 (elementwise.h); infinity is not an
// integer, so int + inf must not be squeezed into int64.
TEST(BinaryValues, IntegerTensorWithInfiniteScalarIsFloat) {
  Tensor r = make_i64({1, 2}) + kInf;
  EXPECT_TRUE(is_floating_point(r.dtype())) << "got " << r.dtype();
  expect_values(r, {kInf, kInf});
  Tensor m = maximum(make_i32({1, -2}), -kInf);
  EXPECT_TRUE(is_floating_point(m.dtype())) << "got " << m.dtype();
  expect_values(m, {1.0, -2.0});
}

TEST(BinaryValues, IntegerArithmeticIsExact) {
  Tensor a = make_i64({int64_t{1} << 40, -5, 7});
  Tensor b = make_i64({3, 2, -2});
  EXPECT_EQ((a + b).tolist<int64_t>(), (std::vector<int64_t>{(int64_t{1} << 40) + 3, -3, 5}));
  EXPECT_EQ((a * b).tolist<int64_t>(), (std::vector<int64_t>{(int64_t{1} << 40) * 3, -10, -14}));
  EXPECT_EQ(maximum(a, b).tolist<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, 2, 7}));
  EXPECT_EQ(minimum(a, b).tolist<int64_t>(), (std::vector<int64_t>{3, -5, -2}));
  EXPECT_EQ(pow(make_i64({2, 3}), make_i64({10, 3})).tolist<int64_t>(), (std::vector<int64_t>{1024, 27}));
}

// ---------------------------------------------------------------------------------------------
// Comparisons, where, clamp
// ---------------------------------------------------------------------------------------------

TEST(CompareValues, AllSixWithBroadcastAndScalars) {
  std::vector<double> av = {1, 2, 3, 4, 5, 6}, bv = {2, 2, 7};
  Tensor a = make(av, {2, 3}), b = make(bv, {3});
  struct Cmp {
    const char* name;
    Tensor (*tt)(const Tensor&, const Tensor&);
    Tensor (*ts)(const Tensor&, double);
    std::function<double(double, double)> ref;
  };
  std::vector<Cmp> cmps = {
      {"eq", eq, eq, [](double x, double y) { return double(x == y); }},
      {"ne", ne, ne, [](double x, double y) { return double(x != y); }},
      {"lt", lt, lt, [](double x, double y) { return double(x < y); }},
      {"le", le, le, [](double x, double y) { return double(x <= y); }},
      {"gt", gt, gt, [](double x, double y) { return double(x > y); }},
      {"ge", ge, ge, [](double x, double y) { return double(x >= y); }},
  };
  for (const Cmp& c : cmps) {
    Tensor r = c.tt(a, b);
    EXPECT_EQ(r.dtype(), kBool) << c.name;
    EXPECT_EQ(r.sizes(), (Shape{2, 3})) << c.name;
    expect_values(r, binary_ref(av, {2, 3}, bv, {3}, c.ref), 0, 0, c.name);
    Tensor s = c.ts(a, 3.0);
    EXPECT_EQ(s.dtype(), kBool) << c.name;
    expect_values(s, map_ref(av, [&](double x) { return c.ref(x, 3.0); }), 0, 0, std::string(c.name) + " scalar");
    Tensor col = make({2, 5}, {2, 1});  // [2,1] with [1,3]
    Tensor row = make({1, 2, 5}, {1, 3});
    expect_values(c.tt(col, row), binary_ref({2, 5}, {2, 1}, {1, 2, 5}, {1, 3}, c.ref), 0, 0,
                  std::string(c.name) + " [2,1] [1,3]");
  }
}

TEST(CompareValues, MixedDtypesAndNaN) {
  Tensor i = make_i64({1, 2, 3});
  expect_values(eq(i, make({1.0, 2.5, 3.0}, {3}, kFloat32)), {1, 0, 1});
  expect_values(lt(i, 2.5), {1, 1, 0});  // the fractional scalar is not truncated to 2
  expect_values(gt(i, 2.5), {0, 0, 1});
  expect_values(eq(i, 2.0), {0, 1, 0});
  Tensor n = make({kNaN, 1.0}, {2});
  expect_values(eq(n, n), {0, 1});
  expect_values(ne(n, n), {1, 0});
  expect_values(lt(n, 5.0), {0, 1});
}

TEST(WhereValues, BroadcastAndPromotion) {
  std::vector<double> av = {-1, 2, -3, 4, -5, 6};
  Tensor a = make(av, {2, 3});
  Tensor cond = gt(a, 0.0);
  Tensor r = where(cond, a, neg(a));
  expect_values(r, {1, 2, 3, 4, 5, 6});
  // [2,3] condition, [3] and 0-dim values.
  Tensor r2 = where(cond, make({10, 20, 30}, {3}), scalar_tensor(-1.0, kFloat64));
  expect_values(r2, {-1, 20, -1, 10, -1, 30});
  // [2,1] condition with [1,3] values.
  Tensor c2 = make({1, 0}, {2, 1}).to(kBool);
  Tensor r3 = where(c2, make({1, 2, 3}, {1, 3}), make({7, 8, 9}, {1, 3}));
  EXPECT_EQ(r3.sizes(), (Shape{2, 3}));
  expect_values(r3, {1, 2, 3, 7, 8, 9});
  // int with float promotes.
  Tensor r4 = where(cond, make_i64({1, 2, 3}), make({0.5, 0.5, 0.5}, {3}, kFloat32));
  EXPECT_EQ(r4.dtype(), kFloat32);
  expect_values(r4, {0.5, 2, 0.5, 1, 0.5, 3});
  // scalar form
  expect_values(where(cond, a, 0.0), {0, 2, 0, 4, 0, 6});
}

// The scalar form follows the documented scalar rule: a fractional scalar with an integer tensor
// gives float32 instead of being truncated.
TEST(WhereValues, FractionalScalarWithIntegerTensorIsNotTruncated) {
  Tensor cond = make({1, 0}, {2}).to(kBool);
  Tensor r = where(cond, make_i64({4, 5}), 2.5);
  expect_values(r, {4.0, 2.5});
}

TEST(ClampValues, RangesNaNAndIntegers) {
  Tensor x = make({-2.0, -0.5, 0.0, 0.5, 2.0, kNaN}, {6});
  expect_values(clamp(x, -1.0, 1.0), {-1.0, -0.5, 0.0, 0.5, 1.0, kNaN});
  expect_values(clamp(x, 0.0), {0.0, 0.0, 0.0, 0.5, 2.0, kNaN});
  expect_values(clamp(x, -kInf, 0.25), {-2.0, -0.5, 0.0, 0.25, 0.25, kNaN});
  expect_values(clamp(x, 0.3, 0.3), {0.3, 0.3, 0.3, 0.3, 0.3, kNaN});
  Tensor xf = x.to(kFloat32);
  Tensor cf = clamp(xf, -1.0, 1.0);
  EXPECT_EQ(cf.dtype(), kFloat32);
  expect_values(cf, {-1.0, -0.5, 0.0, 0.5, 1.0, kNaN});
  Tensor ci = clamp(make_i64({-5, 0, 5, 10}), -1.0, 6.0);
  EXPECT_EQ(ci.dtype(), kInt64);
  EXPECT_EQ(ci.tolist<int64_t>(), (std::vector<int64_t>{-1, 0, 5, 6}));
}

// ---------------------------------------------------------------------------------------------
// In-place ops
// ---------------------------------------------------------------------------------------------

TEST(InplaceValues, ArithmeticWithTensorsAndScalars) {
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  x.add_(make({10, 20, 30}, {3}));  // broadcast other
  expect_values(x, {11, 22, 33, 14, 25, 36});
  x.sub_(make({1, 2}, {2, 1}), 2.0);
  expect_values(x, {9, 20, 31, 10, 21, 32});
  x.mul_(make({2, 1, 0.5}, {3}));
  expect_values(x, {18, 20, 15.5, 20, 21, 16});
  x.div_(scalar_tensor(2.0, kFloat64));
  expect_values(x, {9, 10, 7.75, 10, 10.5, 8});
  x.add_(1.0);
  x.sub_(0.5);
  x.mul_(2.0);
  x.div_(4.0);
  expect_values(x, {4.75, 5.25, 4.125, 5.25, 5.5, 4.25});
  x.add_(make({1, 1, 1}, {3}), -4.0);
  expect_values(x, {0.75, 1.25, 0.125, 1.25, 1.5, 0.25});
  x.clamp_(0.2, 1.3);
  expect_values(x, {0.75, 1.25, 0.2, 1.25, 1.3, 0.25});
  x.fill_(7.5);
  expect_values(x, std::vector<double>(6, 7.5));
  x.zero_();
  expect_values(x, std::vector<double>(6, 0.0));
  Tensor y = make({1, 2}, {2});
  y += make({1, 1}, {2});
  y *= make({3, 3}, {2});
  y -= make({1, 1}, {2});
  y /= make({5, 5}, {2});
  expect_values(y, {1.0, 1.6});
}

TEST(InplaceValues, IntegerAndFloat32Targets) {
  Tensor i = make_i64({1, 2, 3});
  i.add_(make_i32({1, 1, 1}));
  i.mul_(3.0);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.tolist<int64_t>(), (std::vector<int64_t>{6, 9, 12}));
  Tensor f = make({1, 2, 3}, {3}, kFloat32);
  f.add_(make({0.5, 0.5, 0.5}, {3}, kFloat64));  // f64 other into an f32 tensor
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_values(f, {1.5, 2.5, 3.5});
  f.mul_(make_i64({2, 2, 2}));
  expect_values(f, {3, 5, 7});
}

TEST(InplaceValues, WritesThroughViewsReachTheBase) {
  Tensor base = zeros({3, 4}, kFloat64);
  base.select(0, 1).add_(1.0);
  expect_values(base, {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0});
  base.t().select(0, 2).mul_(0.0).add_(5.0);  // column 2 through a transposed view
  expect_values(base, {0, 0, 5, 0, 1, 1, 5, 1, 0, 0, 5, 0});
  base.slice(1, 0, 4, 2).fill_(-1.0);  // columns 0 and 2
  expect_values(base, {-1, 0, -1, 0, -1, 1, -1, 1, -1, 0, -1, 0});
  base.narrow(0, 1, 2).narrow(1, 1, 2).clamp_(0.5, 0.75);
  expect_values(base, {-1, 0, -1, 0, -1, 0.75, 0.5, 1, -1, 0.5, 0.5, 0});
  base.slice(0, 0, 3, 2).zero_();  // rows 0 and 2
  expect_values(base, {0, 0, 0, 0, -1, 0.75, 0.5, 1, 0, 0, 0, 0});
  base.view({12}).slice(0, 1, 12, 3).sub_(make({1, 2, 3, 4}, {4}));  // elements 1, 4, 7, 10
  expect_values(base, {0, -1, 0, 0, -3, 0.75, 0.5, -2, 0, 0, -4, 0});
  Tensor v = base.reshape({2, 6});
  v.div_(make({2, 2, 2, 2, 2, 2}, {6}));
  expect_values(base, {0, -0.5, 0, 0, -1.5, 0.375, 0.25, -1, 0, 0, -2, 0});
}

TEST(InplaceValues, SelfAliasingOperands) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor x = make(v, {3, 3});
  x.add_(x.t());  // reads the transpose of the original, not half-updated values
  std::vector<double> want(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want[i * 3 + j] = v[i * 3 + j] + v[j * 3 + i];
  expect_values(x, want);
  Tensor y = make({1, 2, 3, 4}, {4});
  y.mul_(y);
  expect_values(y, {1, 4, 9, 16});
  Tensor z = make({1, 2, 3, 4}, {4});
  z.slice(0, 1, 4).sub_(z.slice(0, 0, 3));  // overlapping shifted views
  expect_values(z, {1, 1, 1, 1});
}

// ---------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------

TEST(ReductionValues, SumMeanOverDimsAndKeepdim) {
  const Shape shape = {2, 3, 4, 5};
  std::vector<double> v = uniform_values(120, 21);
  Tensor x = make(v, shape);
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {3}, {-1}, {0, 2}, {1, 3}, {-1, 0}, {0, 1, 2, 3}, {2, 1}};
  for (const auto& dims : dim_sets) {
    for (bool keepdim : {false, true}) {
      std::string what = "dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
      Tensor s = dims.empty() ? sum(x) : sum(x, dims, keepdim);
      Tensor m = dims.empty() ? mean(x) : mean(x, dims, keepdim);
      std::vector<bool> mask = mask_of(4, dims);
      Shape want_shape;
      for (size_t d = 0; d < 4; ++d)
        if (!mask[d]) want_shape.push_back(shape[d]);
        else if (keepdim && !dims.empty()) want_shape.push_back(1);
      EXPECT_EQ(s.sizes(), want_shape) << what;
      EXPECT_EQ(m.sizes(), want_shape) << what;
      expect_values(s, sum_ref(v, shape, dims), 1e-12, 1e-12, "sum " + what);
      expect_values(m, mean_ref(v, shape, dims), 1e-12, 1e-12, "mean " + what);
    }
  }
  // Method forms.
  expect_values(x.sum(2), sum_ref(v, shape, {2}));
  expect_values(x.mean(1, true), mean_ref(v, shape, {1}));
  EXPECT_EQ(x.mean(1, true).sizes(), (Shape{2, 1, 4, 5}));
  expect_values(x.sum({0, 3}), sum_ref(v, shape, {0, 3}));
}

TEST(ReductionValues, Float32Sums) {
  std::vector<double> v = round_f32(uniform_values(300, 22));
  Tensor x = make(v, {20, 15}, kFloat32);
  Tensor s = sum(x, {0});
  EXPECT_EQ(s.dtype(), kFloat32);
  expect_values(s, sum_ref(v, {20, 15}, {0}), 1e-6, 1e-6);
  expect_values(mean(x, {1}), mean_ref(v, {20, 15}, {1}), 1e-6, 1e-7);
  expect_values(sum(x), sum_ref(v, {20, 15}, {}), 1e-6, 1e-6);
}

TEST(ReductionValues, IntegerAndBoolSumsAreInt64) {
  Tensor i = make_i32({2000000000, 2000000000, 5, -7, 1, 2}, {2, 3});
  Tensor s = sum(i);
  EXPECT_EQ(s.dtype(), kInt64);
  EXPECT_EQ(s.item<int64_t>(), 4000000001LL);
  Tensor s0 = sum(i, {0});
  EXPECT_EQ(s0.dtype(), kInt64);
  EXPECT_EQ(s0.tolist<int64_t>(), (std::vector<int64_t>{1999999993, 2000000001, 7}));
  Tensor s1 = sum(i, {1}, true);
  EXPECT_EQ(s1.sizes(), (Shape{2, 1}));
  EXPECT_EQ(s1.tolist<int64_t>(), (std::vector<int64_t>{4000000005LL, -4}));
  Tensor b = gt(make({1, -1, 2, -2, 3, 0}, {2, 3}), 0.0);
  Tensor c = sum(b);
  EXPECT_EQ(c.dtype(), kInt64);
  EXPECT_EQ(c.item<int64_t>(), 3);
  EXPECT_EQ(sum(b, {1}).tolist<int64_t>(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(sum(make_i64({-1, -2, -3})).item<int64_t>(), -6);
}

TEST(ReductionValues, VarCorrections) {
  const Shape shape = {3, 4, 5};
  std::vector<double> v = uniform_values(60, 23, -3, 3);
  Tensor x = make(v, shape);
  expect_values(var(x), var_ref(v, shape, {}, 1.0), 1e-12, 1e-12, "var all");
  expect_values(var(x, 0.0), var_ref(v, shape, {}, 0.0), 1e-12, 1e-12, "var all c0");
  expect_values(var(x, Shape{1}), var_ref(v, shape, {1}, 1.0), 1e-12, 1e-12, "var dim 1");
  expect_values(var(x, Shape{1}, 0.0), var_ref(v, shape, {1}, 0.0), 1e-12, 1e-12, "var dim 1 c0");
  Tensor k = var(x, Shape{0, 2}, 1.0, true);
  EXPECT_EQ(k.sizes(), (Shape{1, 4, 1}));
  expect_values(k, var_ref(v, shape, {0, 2}, 1.0), 1e-12, 1e-12, "var dims 0,2");
  // Known values: var([1,2,3,4]) = 5/3 (unbiased), 1.25 (population).
  EXPECT_NEAR(var(make({1, 2, 3, 4}, {4})).item(), 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(var(make({1, 2, 3, 4}, {4}), 0.0).item(), 1.25, 1e-12);
  Tensor f = var(make({1, 2, 3, 4}, {2, 2}, kFloat32), Shape{1}, 0.0);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_values(f, {0.25, 0.25});
}

TEST(ReductionValues, EmptyReductions) {
  Tensor e = zeros({0, 3}, kFloat64);
  Tensor s = sum(e, {0});
  EXPECT_EQ(s.sizes(), (Shape{3}));
  expect_values(s, {0, 0, 0});
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(sum(e, {1}).sizes(), (Shape{0}));
}

TEST(ReductionValues, MaxMinOverallAndAlongDims) {
  const Shape shape = {3, 4, 5};
  std::vector<double> v = uniform_values(60, 24);
  Tensor x = make(v, shape);
  EXPECT_DOUBLE_EQ(max(x).item(), *std::max_element(v.begin(), v.end()));
  EXPECT_DOUBLE_EQ(min(x).item(), *std::min_element(v.begin(), v.end()));
  EXPECT_EQ(max(x).dim(), 0);
  EXPECT_DOUBLE_EQ(x.max().item(), *std::max_element(v.begin(), v.end()));
  EXPECT_DOUBLE_EQ(x.min().item(), *std::min_element(v.begin(), v.end()));
  for (int64_t d : {0, 1, 2, -1}) {
    for (bool is_max : {true, false}) {
      std::vector<double> want_v, want_i;
      extreme_ref(v, shape, d < 0 ? d + 3 : d, is_max, want_v, want_i);
      ValuesIndices r = is_max ? max(x, d) : min(x, d);
      std::string what = std::string(is_max ? "max" : "min") + " dim " + std::to_string(d);
      EXPECT_EQ(r.indices.dtype(), kInt64) << what;
      expect_values(r.values, want_v, 0, 0, what);
      expect_values(r.indices, want_i, 0, 0, what);
      Tensor arg = is_max ? argmax(x, d) : argmin(x, d);
      expect_values(arg, want_i, 0, 0, "arg" + what);
      ValuesIndices k = is_max ? max(x, d, true) : min(x, d, true);
      Shape kept = shape;
      kept[static_cast<size_t>(d < 0 ? d + 3 : d)] = 1;
      EXPECT_EQ(k.values.sizes(), kept) << what;
      EXPECT_EQ(k.indices.sizes(), kept) << what;
    }
  }
  expect_values(x.argmax(1), [&] {
    std::vector<double> a, b;
    extreme_ref(v, shape, 1, true, a, b);
    return b;
  }());
}

TEST(ReductionValues, TiesGiveTheFirstIndex) {
  Tensor x = make({1, 3, 3, 2, 2, 1, 5, 5, 5}, {3, 3});
  ValuesIndices mx = max(x, 1);
  expect_values(mx.values, {3, 2, 5});
  EXPECT_EQ(mx.indices.tolist<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  ValuesIndices mn = min(x, 1);
  expect_values(mn.values, {1, 1, 5});
  EXPECT_EQ(mn.indices.tolist<int64_t>(), (std::vector<int64_t>{0, 2, 0}));
  Tensor y = make({2, 7, 1, 2, 7, 1, 0, 7, 1}, {3, 3});  // ties down the columns
  EXPECT_EQ(max(y, 0).indices.tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(min(y, 0).indices.tolist<int64_t>(), (std::vector<int64_t>{2, 0, 0}));
  EXPECT_EQ(argmax(y, 0).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(argmin(y, 1).tolist<int64_t>(), (std::vector<int64_t>{2, 2, 0}));
  // Flattened argmax: the first of the three 7s.
  EXPECT_EQ(argmax(y).item<int64_t>(), 1);
  EXPECT_EQ(argmax(y).dim(), 0);
  // Integers.
  Tensor i = make_i32({4, 9, 9, -1}, {2, 2});
  ValuesIndices mi = max(i, 1);
  EXPECT_EQ(mi.values.dtype(), kInt32);
  EXPECT_EQ(mi.values.tolist<int32_t>(), (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(mi.indices.tolist<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(max(i).item<int32_t>(), 9);
  EXPECT_EQ(min(i).item<int32_t>(), -1);
}

TEST(ReductionValues, MaxWithNaNIsNaN) {
  Tensor x = make({1, kNaN, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(std::isnan(max(x).item()));
  ValuesIndices r = max(x, 1);
  expect_values(r.values, {kNaN, 6});
  EXPECT_EQ(r.indices.tolist<int64_t>(), (std::vector<int64_t>{1, 2}));
}

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
  std::vector<double> at_ref = concat_ref(transpose_ref(slice_ref(stored, 0, 12), 4, 3),
                                          transpose_ref(slice_ref(stored, 12, 12), 4, 3));
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
  expect_values(addmm(make(bias, {m}), make(transpose_ref(a, n, k), {k, n}).t(), Bm),
                [&] {
                  std::vector<double> w(n * m);
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t j = 0; j < m; ++j) w[i * m + j] = bias[j] + ab[i * m + j];
                  return w;
                }(),
                1e-12, 1e-12, "addmm transposed a");

  // linear: x @ W^T + b
  const int64_t in = 4, out = 3;
  std::vector<double> w = uniform_values(out * in, 66), bvec = uniform_values(out, 67), x = uniform_values(2 * 5 * in, 68);
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
    expect_values(log_softmax(x, 0), transpose_ref(softmax_rows_ref(vt, 5, 3, true), 5, 3), rt, at,
                  "log_softmax 0");
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

// ---------------------------------------------------------------------------------------------
// Views and copies
// ---------------------------------------------------------------------------------------------

TEST(ViewValues, ViewsReadTheRightElements) {
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = i;
  Tensor x = make(v, {2, 3, 4});
  expect_values(x.permute({2, 0, 1}), [&] {
    std::vector<double> r;
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) r.push_back(v[(i * 3 + j) * 4 + k]);
    return r;
  }());
  expect_values(x.transpose(0, 2).reshape({-1}), [&] {
    std::vector<double> r;
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j)
        for (int i = 0; i < 2; ++i) r.push_back(v[(i * 3 + j) * 4 + k]);
    return r;
  }());
  expect_values(x.select(1, 2), {8, 9, 10, 11, 20, 21, 22, 23});
  expect_values(x[1].select(1, -1), {15, 19, 23});
  expect_values(x.narrow(2, 1, 2), {1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22});
  expect_values(x.slice(2, 0, 4, 3), {0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23});
  expect_values(x.slice(1, -2, 100), {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  expect_values(x.flatten(1), v);
  EXPECT_EQ(x.flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(x.unsqueeze(1).sizes(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).sizes(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).squeeze().sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.unsqueeze(0).squeeze(0).sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.squeeze(1).sizes(), (Shape{2, 3, 4}));  // not size 1: unchanged
  Tensor e = make({1, 2, 3}, {3, 1}).expand({2, 3, 4});
  EXPECT_EQ(e.sizes(), (Shape{2, 3, 4}));
  expect_values(e, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  expect_values(make({1, 2, 3}, {3, 1}).expand({-1, 2}), {1, 1, 2, 2, 3, 3});
  expect_values(x.view({4, 6}).t().contiguous().view({-1}), [&] {
    std::vector<double> r;
    for (int j = 0; j < 6; ++j)
      for (int i = 0; i < 4; ++i) r.push_back(v[i * 6 + j]);
    return r;
  }());
}

TEST(ViewValues, ConversionsAndCopies) {
  Tensor f = make({1.5, -2.5, 3.0}, {3});
  EXPECT_EQ(f.to(kInt64).tolist<int64_t>(), (std::vector<int64_t>{1, -2, 3}));  // truncation, like C
  expect_values(f.to(kFloat32), {1.5, -2.5, 3.0});
  expect_values(f.to(kFloat16).to(kFloat64), {1.5, -2.5, 3.0});
  expect_values(f.to(kBFloat16), {1.5, -2.5, 3.0});
  expect_values(f.to(kBool), {1, 1, 1});
  expect_values(make({0.0, 2.0}, {2}).to(kBool), {0, 1});
  Tensor dst = zeros({2, 3}, kFloat32);
  dst.copy_(make({1, 2, 3}, {3}));
  expect_values(dst, {1, 2, 3, 1, 2, 3});
  Tensor c = make({1, 2, 3, 4}, {2, 2}).t().clone();
  EXPECT_TRUE(c.is_contiguous());
  expect_values(c, {1, 3, 2, 4});
  EXPECT_EQ(arange(5).tolist<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  expect_values(arange(1, 2, 0.25, kFloat64), {1, 1.25, 1.5, 1.75});
  expect_values(arange(3, 0, -1, kFloat64), {3, 2, 1});
  expect_values(linspace(0, 1, 5, kFloat64), {0, 0.25, 0.5, 0.75, 1});
  expect_values(full({2}, 3.5, kFloat32), {3.5, 3.5});
  expect_values(ones_like(make_i32({1, 2})), {1, 1});
  EXPECT_EQ(ones_like(make_i32({1, 2})).dtype(), kInt32);
}

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
  out.push_back({"transposed", make(uniform_values(24, 101, 0.1, 2.0), {4, 6}).t()});  // [6, 4]
  out.push_back({"sliced with step", make(uniform_values(48, 102, 0.1, 2.0), {6, 8}).slice(1, 1, 8, 2)});  // [6, 4]
  out.push_back({"expanded", make(uniform_values(4, 103, 0.1, 2.0), {4}).expand({6, 4})});
  out.push_back({"narrowed", make(uniform_values(80, 104, 0.1, 2.0), {8, 10}).narrow(0, 1, 6).narrow(1, 3, 4)});
  out.push_back({"stepped rows", make(uniform_values(64, 105, 0.1, 2.0), {16, 4}).slice(0, 1, 16, 3).narrow(0, 0, 5)
                                     .unsqueeze(0).expand({1, 5, 4}).reshape({5, 4})});
  out.push_back({"permuted", make(uniform_values(24, 106, 0.1, 2.0), {2, 4, 3}).permute({2, 1, 0}).reshape({3, 8})
                                 .t()});
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
  ThreadsGuard threads;
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
  for (size_t i = 0; i < v.size(); ++i) prod[i] = static_cast<double>(static_cast<float>(v[i]) * static_cast<float>(row[i % 1024]));
  expect_values(x * make(row, {1024}, kFloat32), prod, 0, 0, "mul broadcast row large");
  // A transposed operand.
  std::vector<double> tsum(v.size());
  for (int64_t i = 0; i < 1024; ++i)
    for (int64_t j = 0; j < 1024; ++j)
      tsum[i * 1024 + j] = static_cast<double>(static_cast<float>(v[i * 1024 + j]) + static_cast<float>(w[j * 1024 + i]));
  expect_values(x + y.t(), tsum, 0, 0, "add transposed large");
  // Comparisons, where, clamp, conversions.
  std::vector<double> gtv = map_ref(v, [](double a) { return a > 0.5 ? 1.0 : 0.0; });
  expect_values(gt(x, 0.5), gtv, 0, 0, "gt large");
  expect_values(where(gt(x, 0.5), x, 0.0), map_ref(v, [](double a) { return a > 0.5 ? a : 0.0; }), 0, 0,
                "where large");
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
  ThreadsGuard threads;
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
  ThreadsGuard threads;
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
  ThreadsGuard threads;
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
  ThreadsGuard threads;
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
  ThreadsGuard threads;
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

TEST(MatmulValues, EdgeShapes) {
  // n = 1, m = 1, k = 1 and combinations.
  for (auto [n, k, m] : std::vector<std::array<int64_t, 3>>{{1, 4, 5}, {3, 4, 1}, {3, 1, 5}, {1, 1, 1}, {1, 7, 1}}) {
    std::vector<double> a = uniform_values(n * k, 171), b = uniform_values(k * m, 172);
    std::string what = "mm " + std::to_string(n) + "x" + std::to_string(k) + "x" + std::to_string(m);
    expect_values(mm(make(a, {n, k}), make(b, {k, m})), matmul_ref(a, b, n, k, m), 1e-12, 1e-12, what);
    expect_values(mm(make(transpose_ref(a, n, k), {k, n}).t(), make(transpose_ref(b, k, m), {m, k}).t()),
                  matmul_ref(a, b, n, k, m), 1e-12, 1e-12, what + " transposed");
    expect_values(bmm(make(a, {1, n, k}).expand({3, n, k}), make(b, {1, k, m}).expand({3, k, m})),
                  concat_ref(concat_ref(matmul_ref(a, b, n, k, m), matmul_ref(a, b, n, k, m)), matmul_ref(a, b, n, k, m)),
                  1e-12, 1e-12, what + " bmm expanded batch");
  }
  // A stepped vector on the right.
  std::vector<double> mat = uniform_values(12, 173), vec = uniform_values(8, 174);
  std::vector<double> vs = {vec[0], vec[2], vec[4], vec[6]};
  expect_values(matmul(make(mat, {3, 4}), make(vec, {8}).slice(0, 0, 8, 2)), matmul_ref(mat, vs, 3, 4, 1), 1e-12,
                1e-12, "matmul stepped vector");
  // linear on a non-contiguous 3-D input.
  std::vector<double> x = uniform_values(2 * 4 * 3, 175), w = uniform_values(5 * 4, 176);
  Tensor xt = make(x, {2, 3, 4}).transpose(1, 2);  // [2, 4, 3] -> wants in = 3
  std::vector<double> xr = concat_ref(transpose_ref(slice_ref(x, 0, 12), 3, 4), transpose_ref(slice_ref(x, 12, 12), 3, 4));
  std::vector<double> w3 = uniform_values(5 * 3, 177);
  expect_values(linear(xt, make(w3, {5, 3})), matmul_ref(xr, transpose_ref(w3, 5, 3), 8, 3, 5), 1e-12, 1e-12,
                "linear transposed 3-D input");
  (void)w;
}

TEST(ViewValues, ReshapeOfExpandedAndSizeOneDims) {
  Tensor e = make({1, 2, 3}, {3, 1}).expand({3, 4});
  expect_values(e.reshape({12}), {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  expect_values(e.reshape({4, 3}), {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  expect_values(e.t().reshape({-1}), {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  // Views with size-1 dims whose strides are arbitrary.
  Tensor base = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor col = base.narrow(1, 2, 1);  // [3, 1] stride (4, 1)
  expect_values(col.view({3}), {2, 6, 10});
  expect_values(col.t().view({3}), {2, 6, 10});
  expect_values(col.unsqueeze(0).view({1, 3}), {2, 6, 10});
  Tensor row = base.select(0, 1).unsqueeze(1);  // [4, 1]
  expect_values(row.expand({4, 2}).reshape({8}), {4, 4, 5, 5, 6, 6, 7, 7});
  expect_values(base.t().narrow(0, 1, 1).view({3}), {1, 5, 9});
}


TEST(ViewValues, SliceNarrowEdgeCasesAndOverlappingCopy) {
  Tensor x = make({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  expect_values(x.narrow(1, -2, 2), {2, 3, 6, 7});
  EXPECT_EQ(x.slice(1, 3, 1).sizes(), (Shape{2, 0}));
  EXPECT_EQ(x.slice(1, 10, 20).sizes(), (Shape{2, 0}));
  expect_values(x.slice(1, -100, 2), {0, 1, 4, 5});
  expect_values(x.slice(1, 1, 4, 2), {1, 3, 5, 7});
  Tensor y = make({1, 2, 3, 4}, {4});
  y.slice(0, 1, 4).copy_(y.slice(0, 0, 3));  // overlapping source and destination
  expect_values(y, {1, 1, 2, 3});
  Tensor s = scalar_tensor(4.0, kFloat64);
  EXPECT_EQ(sum(s, {0}).dim(), 0);
  EXPECT_DOUBLE_EQ(sum(s, {0}).item(), 4.0);
  EXPECT_DOUBLE_EQ(mean(s, {-1}).item(), 4.0);
  EXPECT_DOUBLE_EQ(max(s, 0).values.item(), 4.0);
  EXPECT_EQ(max(s, 0).indices.item<int64_t>(), 0);
  EXPECT_EQ(s.unsqueeze(0).sizes(), (Shape{1}));
  EXPECT_EQ(ones({1, 1}).squeeze().dim(), 0);
  expect_values(s.expand({2, 3}), std::vector<double>(6, 4.0));
}

TEST(ViewValues, SixteenBitConversionsRound) {
  Tensor x = make({65504.0, 65519.0, 65520.0, 1.0 / 3.0, -2.5, 1e-8, 6e-8, 1e5, kNaN}, {9});
  expect_values(x.to(kFloat16), {65504.0, 65504.0, kInf, 0.333251953125, -2.5, 0.0, 5.960464477539063e-08, kInf, kNaN},
                0, 0, "float16");
  Tensor y = make({1.0 / 3.0, -2.5, 1e30, 3.0e38, kNaN}, {5});
  expect_values(y.to(kBFloat16), {0.333984375, -2.5, 1.0002555517425873e+30, 3.00405527047391e+38, kNaN}, 0, 0,
                "bfloat16");
}

}  // namespace
}  // namespace tapegrad
