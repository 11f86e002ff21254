// Reference helpers for the op value tests (tests/ops/test_values_*.cpp): plain C++ over std::vector,
// independent of tapegrad's kernels, plus the tensor builders and the comparison those tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/random_values.h"
#include "support/test_util.h"

namespace tapegrad::reference {

using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Uniform values from the test's own generator (not tapegrad's Philox).
using testing::uniform_values;

inline std::vector<double> round_f32(std::vector<double> v) {
  for (double& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

// Uniform values already representable in `dt` (so an f32 tensor holds exactly these numbers).
inline std::vector<double> data_for(DType dt, size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v = uniform_values(n, seed, lo, hi);
  return dt == kFloat32 ? round_f32(v) : v;
}

inline Tensor make(const std::vector<double>& v, const Shape& shape, DType dt = kFloat64) {
  return tensor<double>(v, shape, TensorOptions(dt));
}

inline Tensor make_i64(const std::vector<int64_t>& v, const Shape& shape = {}) {
  return tensor<int64_t>(v, shape);
}
inline Tensor make_i32(const std::vector<int32_t>& v, const Shape& shape = {}) {
  return tensor<int32_t>(v, shape);
}

inline double tol_for(DType dt) {
  return dt == kFloat32 ? 3e-6 : 1e-12;
}

// Compares a tensor's values with a reference: |got - want| <= atol + rtol |want|; NaN must match NaN
// and infinities must match exactly. Stops after a few reported mismatches.
inline void expect_values(const Tensor& t, const std::vector<double>& want, double rtol = 1e-12, double atol = 1e-12,
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
inline std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

inline Shape broadcast_ref_shape(const Shape& a, const Shape& b) {
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
inline std::vector<double> broadcast_to_ref(const std::vector<double>& v, const Shape& shape, const Shape& out) {
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

inline std::vector<double> binary_ref(const std::vector<double>& a, const Shape& as, const std::vector<double>& b,
                                      const Shape& bs, const std::function<double(double, double)>& f) {
  Shape out = broadcast_ref_shape(as, bs);
  std::vector<double> ea = broadcast_to_ref(a, as, out), eb = broadcast_to_ref(b, bs, out);
  std::vector<double> r(ea.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = f(ea[i], eb[i]);
  return r;
}

inline std::vector<double> map_ref(const std::vector<double>& v, const std::function<double(double)>& f) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f(v[i]);
  return r;
}

// For a reduction of `shape` over the dims marked in `reduce`: the flat input indices that land in
// each output element (outputs in row-major order; members in increasing input order).
inline std::vector<std::vector<int64_t>> reduce_groups(const Shape& shape, const std::vector<bool>& reduce) {
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

inline std::vector<bool> mask_of(size_t ndim, const std::vector<int64_t>& dims) {
  std::vector<bool> m(ndim, dims.empty());
  for (int64_t d : dims) m[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(ndim) : d)] = true;
  return m;
}

inline std::vector<double> sum_ref(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& dims) {
  std::vector<double> r;
  for (const auto& g : reduce_groups(shape, mask_of(shape.size(), dims))) {
    double s = 0;
    for (int64_t i : g) s += v[static_cast<size_t>(i)];
    r.push_back(s);
  }
  return r;
}

inline std::vector<double> mean_ref(const std::vector<double>& v, const Shape& shape,
                                    const std::vector<int64_t>& dims) {
  std::vector<double> r;
  for (const auto& g : reduce_groups(shape, mask_of(shape.size(), dims))) {
    double s = 0;
    for (int64_t i : g) s += v[static_cast<size_t>(i)];
    r.push_back(s / static_cast<double>(g.size()));
  }
  return r;
}

inline std::vector<double> var_ref(const std::vector<double>& v, const Shape& shape, const std::vector<int64_t>& dims,
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
inline void extreme_ref(const std::vector<double>& v, const Shape& shape, int64_t dim, bool is_max,
                        std::vector<double>& vals, std::vector<double>& idx) {
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

// C[n, m] = A[n, k] B[k, m] of row-major values, summed in double by a triple loop; each operand
// element passes through `round` first (the identity, or a rounding to a 16-bit type that the
// product under test applies to its operands).
struct AsDouble {
  template <class T>
  double operator()(T v) const {
    return static_cast<double>(v);
  }
};
template <class T, class Round = AsDouble>
std::vector<double> matmul_ref(const std::vector<T>& a, const std::vector<T>& b, int64_t n, int64_t k, int64_t m,
                               Round round = {}) {
  std::vector<double> c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += static_cast<double>(round(a[static_cast<size_t>(i * k + p)])) *
             static_cast<double>(round(b[static_cast<size_t>(p * m + j)]));
      c[static_cast<size_t>(i * m + j)] = s;
    }
  return c;
}

// The transpose of a row-major [r, c] matrix.
inline std::vector<double> transpose_ref(const std::vector<double>& v, int64_t r, int64_t c) {
  std::vector<double> t(v.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[static_cast<size_t>(j * r + i)] = v[static_cast<size_t>(i * c + j)];
  return t;
}

// Rows [r0, r0 + nr) step rs and columns [c0, c0 + nc) step cs of a row-major [*, cols] matrix.
inline std::vector<double> submatrix_ref(const std::vector<double>& v, int64_t cols, int64_t r0, int64_t nr, int64_t rs,
                                         int64_t c0, int64_t nc, int64_t cs) {
  std::vector<double> out;
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) out.push_back(v[static_cast<size_t>((r0 + i * rs) * cols + c0 + j * cs)]);
  return out;
}

inline std::vector<double> slice_ref(const std::vector<double>& v, size_t begin, size_t count) {
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                             v.begin() + static_cast<std::ptrdiff_t>(begin + count));
}

inline std::vector<double> concat_ref(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Softmax of each row of a row-major [rows, cols] matrix, computed in long double.
inline std::vector<double> softmax_rows_ref(const std::vector<double>& v, int64_t rows, int64_t cols, bool log) {
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    long double m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::max<long double>(m, v[static_cast<size_t>(r * cols + c)]);
    long double total = 0;
    for (int64_t c = 0; c < cols; ++c)
      total += std::exp(static_cast<long double>(v[static_cast<size_t>(r * cols + c)]) - m);
    for (int64_t c = 0; c < cols; ++c) {
      long double x = static_cast<long double>(v[static_cast<size_t>(r * cols + c)]) - m;
      out[static_cast<size_t>(r * cols + c)] = static_cast<double>(log ? x - std::log(total) : std::exp(x) / total);
    }
  }
  return out;
}

// Per-row cross-entropy with label smoothing e: (1 - e) * (-log p_t) + e * mean_c(-log p_c).
// Ignored rows give 0.
inline std::vector<double> cross_entropy_rows_ref(const std::vector<double>& z, int64_t rows, int64_t classes,
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

}  // namespace tapegrad::reference
