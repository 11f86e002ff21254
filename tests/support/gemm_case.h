// One case of a CPU GEMM kernel test (sgemm, sbgemm): C = alpha op(A) op(B) + beta C, and its
// operands stored with padded leading dimensions, so that no operand is accidentally contiguous
// and a write past C's last column shows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/random_values.h"

namespace tapegrad::testing {

struct GemmCase {
  int64_t m, n, k;
  bool a_transposed, b_transposed;
  float alpha, beta;
};

// A stored [m, k] (lead k + kPad) or transposed [k, m] (lead m + kPad); likewise B; C [m, n] with
// lead n + kPad. All random; where beta is 0, C's first n columns are NaN: they must be
// overwritten, never read.
struct GemmOperands {
  static constexpr int64_t kPad = 3;

  explicit GemmOperands(const GemmCase& t)
      : a_transposed(t.a_transposed),
        b_transposed(t.b_transposed),
        a_lead((t.a_transposed ? t.m : t.k) + kPad),
        b_lead((t.b_transposed ? t.k : t.n) + kPad),
        ldc(t.n + kPad) {
    const int64_t a_rows = t.a_transposed ? t.k : t.m, b_rows = t.b_transposed ? t.n : t.k;
    a = uniform_values<float>(static_cast<size_t>(std::max<int64_t>(a_rows, 1) * a_lead), 1);
    b = uniform_values<float>(static_cast<size_t>(std::max<int64_t>(b_rows, 1) * b_lead), 2);
    c = uniform_values<float>(static_cast<size_t>(t.m * ldc), 3);
    if (t.beta == 0.0f)
      for (size_t i = 0; i < c.size(); ++i)
        if (static_cast<int64_t>(i) % ldc < t.n) c[i] = std::numeric_limits<float>::quiet_NaN();
    c_before = c;
  }

  // op(A)[i, p] and op(B)[p, j].
  float a_at(int64_t i, int64_t p) const { return a_transposed ? a[p * a_lead + i] : a[i * a_lead + p]; }
  float b_at(int64_t p, int64_t j) const { return b_transposed ? b[j * b_lead + p] : b[p * b_lead + j]; }
  // The row and column strides of op(A) and op(B) in their buffers.
  int64_t a_row_stride() const { return a_transposed ? 1 : a_lead; }
  int64_t a_col_stride() const { return a_transposed ? a_lead : 1; }
  int64_t b_row_stride() const { return b_transposed ? 1 : b_lead; }
  int64_t b_col_stride() const { return b_transposed ? b_lead : 1; }

  bool a_transposed, b_transposed;
  int64_t a_lead, b_lead, ldc;
  std::vector<float> a, b, c, c_before;
};

}  // namespace tapegrad::testing
