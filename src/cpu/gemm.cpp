// Matrix products through OpenBLAS. A 2-D operand whose strides are (lead, 1) is read as row-major,
// one with (1, lead) as its transpose; anything else is copied to contiguous first. A product with
// one output row or column is a matrix-vector product: GEMV reads the matrix once, where GEMM would
// first pack all of it (the whole cost of an LSTM step at batch 1).
#include <cblas.h>
#include <omp.h>

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

// A vector of `count` elements of `v` (a row or column of a 2-D tensor) at element stride `inc`;
// BLAS needs a positive increment, so a broadcast (stride 0) vector is made contiguous.
struct BlasVector {
  Tensor tensor;
  int64_t inc = 1;
};

BlasVector as_blas_vector(const Tensor& v, int64_t stride) {
  if (stride >= 1) return {v, stride};
  return {v.detach().contiguous(), 1};
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

// y (len_y, stride inc_y) = alpha * op(M) x + beta * y, M row-major with leading dimension `lead`,
// `rows` x `cols` as stored.
template <class T>
void gemv_call(CBLAS_TRANSPOSE trans, int64_t rows, int64_t cols, double alpha, const T* mat, int64_t lead,
               const T* x, int64_t inc_x, double beta, T* y, int64_t inc_y) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemv(CblasRowMajor, trans, rows, cols, static_cast<float>(alpha), mat, lead, x, inc_x,
                static_cast<float>(beta), y, inc_y);
  } else {
    cblas_dgemv(CblasRowMajor, trans, rows, cols, alpha, mat, lead, x, inc_x, beta, y, inc_y);
  }
}

// out[0, :] (stride 1) = alpha * a[0, :] @ b + beta * out[0, :]; b is k x m.
template <class T>
void row_times_matrix(const Tensor& a, const Tensor& b, T* out, int64_t m, int64_t k, double alpha, double beta) {
  BlasVector x = as_blas_vector(a, a.stride(1));
  BlasOperand mb = as_blas(b, k, m);
  const T* x_ptr = static_cast<const T*>(x.tensor.data_ptr());
  const T* b_ptr = static_cast<const T*>(mb.tensor.data_ptr());
  // b stored [k, m]: y = b^T x. b stored as the transpose of an [m, k] matrix: y = that matrix times x.
  if (mb.trans == CblasNoTrans) {
    gemv_call<T>(CblasTrans, k, m, alpha, b_ptr, mb.lead, x_ptr, x.inc, beta, out, 1);
  } else {
    gemv_call<T>(CblasNoTrans, m, k, alpha, b_ptr, mb.lead, x_ptr, x.inc, beta, out, 1);
  }
}

// out[:, 0] (stride ldc) = alpha * a @ b[:, 0] + beta * out[:, 0]; a is n x k.
template <class T>
void matrix_times_column(const Tensor& a, const Tensor& b, T* out, int64_t ldc, int64_t n, int64_t k, double alpha,
                         double beta) {
  BlasOperand ma = as_blas(a, n, k);
  BlasVector x = as_blas_vector(b, b.stride(0));
  const T* a_ptr = static_cast<const T*>(ma.tensor.data_ptr());
  const T* x_ptr = static_cast<const T*>(x.tensor.data_ptr());
  if (ma.trans == CblasNoTrans) {
    gemv_call<T>(CblasNoTrans, n, k, alpha, a_ptr, ma.lead, x_ptr, x.inc, beta, out, ldc);
  } else {
    gemv_call<T>(CblasTrans, k, n, alpha, a_ptr, ma.lead, x_ptr, x.inc, beta, out, ldc);
  }
}

// Products under this many multiply-adds (about 10 microseconds on one core) run on the calling
// thread: waking a second thread costs more than it saves there, and on a busy machine an OpenMP
// region can wait a whole time slice for its second thread. The per-step GEMV of a batch-1 LSTM is
// well below it, the per-step GEMM of a batch-64 LSTM with H = 128 (4M) above.
constexpr int64_t kSerialMacs = int64_t{1} << 20;

// OpenBLAS (its OpenMP build) takes its thread count from the calling thread's OpenMP setting at
// each call; a small product runs on the calling thread by lowering that setting around the call.
class SerialBlasScope {
 public:
  explicit SerialBlasScope(int64_t macs) : previous_(macs < kSerialMacs ? omp_get_max_threads() : 1) {
    if (previous_ > 1) omp_set_num_threads(1);
  }
  ~SerialBlasScope() {
    if (previous_ > 1) omp_set_num_threads(previous_);
  }
  SerialBlasScope(const SerialBlasScope&) = delete;
  SerialBlasScope& operator=(const SerialBlasScope&) = delete;

 private:
  int previous_;
};

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
    SerialBlasScope serial(n * m * k);
    if (n == 1 || m == 1) {
      // The output is a vector: with beta = 0 it is cleared first, so that uninitialised memory (a
      // NaN pattern) never meets a GEMV that might scale it by 0 instead of setting it.
      if (beta == 0)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) c[i * ldc + j] = T(0);
      if (n == 1) {
        row_times_matrix<T>(a, b, c, m, k, alpha, beta);
      } else {
        matrix_times_column<T>(a, b, c, ldc, n, k, alpha, beta);
      }
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
