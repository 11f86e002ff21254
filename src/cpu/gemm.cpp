// Matrix products through OpenBLAS. A 2-D operand whose strides are (lead, 1) is read as row-major,
// one with (1, lead) as its transpose; anything else is copied to contiguous first.
#include <cblas.h>

#include "cpu/cpu_kernels.h"
#include "cpu/dtype_dispatch.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::cpu {

namespace {

struct BlasOperand {
  Tensor tensor;  // the tensor whose memory BLAS reads (maybe a contiguous copy)
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t lead = 1;
};

// rows x cols matrix at `m`, strides from the last two dims.
BlasOperand as_blas(const Tensor& m, int64_t rows, int64_t cols) {
  int64_t s_row = m.stride(-2), s_col = m.stride(-1);
  if (s_col == 1 && (s_row >= std::max<int64_t>(1, cols) || rows == 1)) return {m, CblasNoTrans, std::max<int64_t>({s_row, cols, 1})};
  if (s_row == 1 && (s_col >= std::max<int64_t>(1, rows) || cols == 1)) return {m, CblasTrans, std::max<int64_t>({s_col, rows, 1})};
  Tensor c = m.detach().contiguous();
  return {c, CblasNoTrans, std::max<int64_t>(cols, 1)};
}

template <class T>
void gemm_call(const BlasOperand& a, const BlasOperand& b, T* c, int64_t ldc, int64_t n, int64_t m, int64_t k,
               const T* a_ptr, const T* b_ptr, double alpha, double beta) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, a.trans, b.trans, n, m, k, static_cast<float>(alpha), a_ptr, a.lead, b_ptr, b.lead,
                static_cast<float>(beta), c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, a.trans, b.trans, n, m, k, alpha, a_ptr, a.lead, b_ptr, b.lead, beta, c, ldc);
  }
}

}  // namespace

// out = alpha * a @ b + beta * out. Accumulates into out when beta = 1; out must have unit column
// stride (the ops allocate it contiguous).
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  if (n == 0 || m == 0) return;
  TG_ASSERT(out.stride(1) == 1 || m == 1);
  dispatch_floating(out.dtype(), "mm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* c = static_cast<T*>(out.data_ptr());
    const int64_t ldc = std::max<int64_t>(out.stride(0), std::max<int64_t>(m, 1));
    if (k == 0) {  // BLAS would read nothing; the product is zero
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) c[i * ldc + j] = beta == 0 ? T(0) : static_cast<T>(beta) * c[i * ldc + j];
      return;
    }
    BlasOperand oa = as_blas(a, n, k), ob = as_blas(b, k, m);
    gemm_call<T>(oa, ob, c, ldc, n, m, k, static_cast<const T*>(oa.tensor.data_ptr()),
                 static_cast<const T*>(ob.tensor.data_ptr()), alpha, beta);
  });
}

// The same per batch: one BLAS call per matrix (OpenBLAS threads inside each call).
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const int64_t batch = a.size(0);
  for (int64_t i = 0; i < batch; ++i) gemm(a.detach().select(0, i), b.detach().select(0, i), out.detach().select(0, i), alpha, beta);
}

}  // namespace tapegrad::cpu
