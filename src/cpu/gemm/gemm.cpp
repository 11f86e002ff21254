// Matrix products through OpenBLAS. A 2-D operand whose strides are (lead, 1) is read as row-major,
// one with (1, lead) as its transpose; anything else is copied to contiguous first. A product with
// one output row or column is a matrix-vector product: GEMV reads the matrix once, where GEMM would
// first pack all of it (the whole cost of an LSTM step at batch 1). Float products may instead go
// through tapegrad's own AVX-512 kernel (sgemm_avx512.cpp says when and why).
#include "cpu/gemm/gemm.h"

#include <cblas.h>

#include <vector>

#include "backend/kernel_tensors.h"
#include "cpu/gemm/gemm_rows.h"
#include "cpu/gemm/gemv_avx512.h"
#include "cpu/gemm/sbgemm.h"
#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/half/convert_16bit.h"
#include "cpu/kernels/shared_kernels.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"

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
  if (s_col == 1 && (s_row >= std::max<int64_t>(1, cols) || rows == 1))
    return {m, CblasNoTrans, std::max<int64_t>({s_row, cols, 1})};
  if (s_row == 1 && (s_col >= std::max<int64_t>(1, rows) || cols == 1))
    return {m, CblasTrans, std::max<int64_t>({s_col, rows, 1})};
  Tensor c = backend::contiguous_copy(m, "gemm");
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
  return {backend::contiguous_copy(v, "gemm"), 1};
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

// Note [small matrix-vector products]: OpenBLAS threads a GEMV from about 10k elements on, and its
// thread count is one process-wide setting (no per-call count in 0.3.21; lowering it around a call
// frees buffers another thread's call may be using). A GEMV of under kSerialMacs multiply-adds
// (a few microseconds: the per-step product of a batch-1 LSTM with H = 128 is 64k) runs instead
// in the loops below on the calling thread, where waking a second thread would cost about as much
// as it saves and, on a busy machine, can wait a whole time slice for that thread.
constexpr int64_t kSerialMacs = int64_t{1} << 20;

// Not under ThreadSanitizer: its runtime is not ready when the loader runs ifunc resolvers.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__)
// One copy of each loop per instruction set, picked when the library loads (the build targets
// baseline x86-64). The loop templates are forced inline so each copy is compiled for its set.
#define TG_GEMV_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TG_GEMV_CLONES
#endif
#if defined(__GNUC__)
#define TG_GEMV_INLINE inline __attribute__((always_inline))
#else
#define TG_GEMV_INLINE inline
#endif

// y[i * inc_y] = alpha * (row i of M) . x + beta * y[i * inc_y] for M rows x cols row-major with
// leading dimension `lead`, x contiguous. Four rows share each load of x. beta = 0 sets y.
template <class T>
TG_GEMV_INLINE void serial_gemv_rows(int64_t rows, int64_t cols, T alpha, const T* mat, int64_t lead, const T* x,
                                     T beta, T* y, int64_t inc_y) {
  auto store = [&](int64_t i, T dot) {
    T& out = y[i * inc_y];
    out = beta == T(0) ? alpha * dot : alpha * dot + beta * out;
  };
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const T *r0 = mat + i * lead, *r1 = r0 + lead, *r2 = r1 + lead, *r3 = r2 + lead;
    T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
    for (int64_t j = 0; j < cols; ++j) {
      a0 += r0[j] * x[j];
      a1 += r1[j] * x[j];
      a2 += r2[j] * x[j];
      a3 += r3[j] * x[j];
    }
    store(i, a0);
    store(i + 1, a1);
    store(i + 2, a2);
    store(i + 3, a3);
  }
  for (; i < rows; ++i) {
    const T* r = mat + i * lead;
    T a = 0;
#pragma omp simd reduction(+ : a)
    for (int64_t j = 0; j < cols; ++j) a += r[j] * x[j];
    store(i, a);
  }
}

// y[j] = alpha * sum_i M[i, j] x[i] + beta * y[j] (y contiguous, cols long): M^T x as scaled rows
// of M added into y, four rows per pass over y.
template <class T>
TG_GEMV_INLINE void serial_gemv_columns(int64_t rows, int64_t cols, T alpha, const T* mat, int64_t lead, const T* x,
                                        T beta, T* y) {
  if (beta == T(0)) {
    for (int64_t j = 0; j < cols; ++j) y[j] = T(0);
  } else if (beta != T(1)) {
    for (int64_t j = 0; j < cols; ++j) y[j] *= beta;
  }
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const T *r0 = mat + i * lead, *r1 = r0 + lead, *r2 = r1 + lead, *r3 = r2 + lead;
    const T s0 = alpha * x[i], s1 = alpha * x[i + 1], s2 = alpha * x[i + 2], s3 = alpha * x[i + 3];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) y[j] += s0 * r0[j] + s1 * r1[j] + s2 * r2[j] + s3 * r3[j];
  }
  for (; i < rows; ++i) {
    const T* r = mat + i * lead;
    const T s = alpha * x[i];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) y[j] += s * r[j];
  }
}

// The cloned entry points (target_clones takes plain functions, not templates).
TG_GEMV_CLONES void serial_gemv_rows_f32(int64_t rows, int64_t cols, float alpha, const float* mat, int64_t lead,
                                         const float* x, float beta, float* y, int64_t inc_y) {
  serial_gemv_rows<float>(rows, cols, alpha, mat, lead, x, beta, y, inc_y);
}
TG_GEMV_CLONES void serial_gemv_rows_f64(int64_t rows, int64_t cols, double alpha, const double* mat, int64_t lead,
                                         const double* x, double beta, double* y, int64_t inc_y) {
  serial_gemv_rows<double>(rows, cols, alpha, mat, lead, x, beta, y, inc_y);
}
TG_GEMV_CLONES void serial_gemv_columns_f32(int64_t rows, int64_t cols, float alpha, const float* mat, int64_t lead,
                                            const float* x, float beta, float* y) {
  serial_gemv_columns<float>(rows, cols, alpha, mat, lead, x, beta, y);
}
TG_GEMV_CLONES void serial_gemv_columns_f64(int64_t rows, int64_t cols, double alpha, const double* mat, int64_t lead,
                                            const double* x, double beta, double* y) {
  serial_gemv_columns<double>(rows, cols, alpha, mat, lead, x, beta, y);
}

// y (stride inc_y) = alpha * op(M) x + beta * y, M row-major `rows` x `cols` as stored with leading
// dimension `lead`; x has stride inc_x >= 1. beta = 0 sets y (its old contents are never read).
template <class T>
void gemv_call(CBLAS_TRANSPOSE trans, int64_t rows, int64_t cols, double alpha, const T* mat, int64_t lead, const T* x,
               int64_t inc_x, double beta, T* y, int64_t inc_y) {
  const int64_t len_x = trans == CblasNoTrans ? cols : rows, len_y = trans == CblasNoTrans ? rows : cols;
  if (rows * cols < kSerialMacs) {
    std::vector<T> x_copy, y_copy;
    if (inc_x != 1) {  // gathered, so the inner loops run over unit strides
      x_copy.resize(static_cast<size_t>(len_x));
      for (int64_t i = 0; i < len_x; ++i) x_copy[static_cast<size_t>(i)] = x[i * inc_x];
      x = x_copy.data();
    }
    const T a = static_cast<T>(alpha), b = static_cast<T>(beta);
    if (trans == CblasNoTrans) {
      if constexpr (std::is_same_v<T, float>) {
        serial_gemv_rows_f32(rows, cols, a, mat, lead, x, b, y, inc_y);
      } else {
        serial_gemv_rows_f64(rows, cols, a, mat, lead, x, b, y, inc_y);
      }
      return;
    }
    T* y_out = y;
    if (inc_y != 1) {
      y_copy.resize(static_cast<size_t>(len_y));
      if (beta != 0)
        for (int64_t j = 0; j < len_y; ++j) y_copy[static_cast<size_t>(j)] = y[j * inc_y];
      y_out = y_copy.data();
    }
    if constexpr (std::is_same_v<T, float>) {
      if (gemv_avx512_available()) {
        gemv_columns_avx512(rows, cols, a, mat, lead, x, b, y_out);
      } else {
        serial_gemv_columns_f32(rows, cols, a, mat, lead, x, b, y_out);
      }
    } else {
      serial_gemv_columns_f64(rows, cols, a, mat, lead, x, b, y_out);
    }
    if (inc_y != 1)
      for (int64_t j = 0; j < len_y; ++j) y[j * inc_y] = y_copy[static_cast<size_t>(j)];
    return;
  }
  // With beta = 0, y is cleared first: uninitialised memory (a NaN pattern) must never meet a GEMV
  // that scales it by 0 instead of setting it.
  if (beta == 0)
    for (int64_t j = 0; j < len_y; ++j) y[j * inc_y] = T(0);
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

// out = alpha * a @ b + beta * out. Accumulates into out when beta = 1; out must have unit column
// stride (the ops allocate it contiguous).
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  if (n == 0 || m == 0) return;
  if (out.dtype() == kBFloat16) return gemm_mixed(a, b, out, alpha, beta, kBFloat16);  // f32 sums, as PyTorch's
  if (out.dtype() == kFloat16) {  // no f16 product unit here: float32 copies, rounded once
    const Tensor a32 = backend::allocate_tensor(a.sizes(), kFloat32, a.device(), "mm");
    const Tensor b32 = backend::allocate_tensor(b.sizes(), kFloat32, b.device(), "mm");
    const Tensor c32 = backend::allocate_tensor(out.sizes(), kFloat32, out.device(), "mm");
    copy(a, a32);
    copy(b, b32);
    if (beta != 0.0) copy(out, c32);
    gemm(a32, b32, c32, alpha, beta);
    copy(c32, out);
    return;
  }
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
    if (n == 1 || m == 1) {
      if (n == 1) {
        row_times_matrix<T>(a, b, c, m, k, alpha, beta);
      } else {
        matrix_times_column<T>(a, b, c, ldc, n, k, alpha, beta);
      }
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      if (use_sgemm_avx512(n, m, k)) {  // reads any strides: no contiguous copies
        sgemm_avx512(n, m, k, static_cast<float>(alpha), static_cast<const float*>(a.data_ptr()), a.stride(0),
                     a.stride(1), static_cast<const float*>(b.data_ptr()), b.stride(0), b.stride(1),
                     static_cast<float>(beta), c, ldc);
        return;
      }
    }
    BlasOperand oa = as_blas(a, n, k), ob = as_blas(b, k, m);
    gemm_call<T>(oa, ob, c, ldc, n, m, k, static_cast<const T*>(oa.tensor.data_ptr()),
                 static_cast<const T*>(ob.tensor.data_ptr()), alpha, beta);
  });
}

// Calls f with t's data as const float* or const BFloat16* (the two types of a bf16 product's operands).
template <class F>
void with_f32_or_bf16(const Tensor& t, const F& f) {
  if (t.dtype() == kBFloat16) {
    f(static_cast<const BFloat16*>(t.data_ptr()));
  } else {
    f(static_cast<const float*>(t.data_ptr()));
  }
}

// gemm with bf16-rounded operands and float32 sums (sbgemm.h): B is rounded and packed per call,
// which costs k x m against the product's n x k x m. Operands may be float32 (rounded as they are
// read) or already bfloat16; a bfloat16 out gets the float32 sums rounded once, as autocast's
// outputs are, each thread rounding its own columns as soon as it has computed them (gemm_mixed);
// where B is shallow, every thread packs its own copy (sbgemm_unpacked). With `bias16` (bf16,
// [m]; a bf16 out only) C's float32 sums start as the bias in every row instead of as out's old
// values (Note [the bias in the float32 sums]).
void mixed_product(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta, DType products,
                   const Tensor& bias16) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  TG_CHECK(products == kBFloat16, "mm: the CPU's mixed-precision products are bfloat16, got ", products);
  if (n == 0 || m == 0) return;
  auto f32_or_bf16 = [](const Tensor& t) { return t.dtype() == kFloat32 || t.dtype() == kBFloat16; };
  TG_CHECK(f32_or_bf16(a) && f32_or_bf16(b) && f32_or_bf16(out),
           "mm: bf16 products need float32 or bfloat16 tensors, got ", a.dtype(), ", ", b.dtype(), " and ",
           out.dtype());
  TG_ASSERT(out.stride(1) == 1 || m == 1);
  const int64_t ldc = std::max<int64_t>(out.stride(0), std::max<int64_t>(m, 1));
  thread_local std::vector<float> scratch;  // float32 sums before their last pass; kept: small products run every step
  if (sbgemm_transposed_is_cheaper(n, k, m, b.stride(0), b.stride(1))) {
    // out^T = B^T A^T (Note [products computed transposed] in sbgemm.cpp): A^T is the matrix packed.
    scratch.resize(static_cast<size_t>(m * n));
    with_f32_or_bf16(b, [&](auto* b_data) {
      with_f32_or_bf16(a, [&](auto* a_data) {
        sbgemm_unpacked(m, k, n, static_cast<float>(alpha), b_data, b.stride(1), b.stride(0), a_data, a.stride(1),
                        a.stride(0), 0.0f, scratch.data(), n);
      });
    });
    const bool half = out.dtype() == kBFloat16;
    store_transposed(scratch.data(), n, n, m, static_cast<float>(beta),
                     half ? nullptr : static_cast<float*>(out.data_ptr()),
                     half ? static_cast<BFloat16*>(out.data_ptr()) : nullptr, ldc);
    return;
  }
  float* c = static_cast<float*>(out.data_ptr());
  RoundedOutput rounded;
  thread_local std::vector<float> bias32;  // bias16 widened: the kernel adds it as it writes its tiles
  const float* bias = nullptr;
  if (out.dtype() == kBFloat16) {
    scratch.resize(static_cast<size_t>(n * m));
    c = scratch.data();
    rounded = RoundedOutput{static_cast<BFloat16*>(out.data_ptr()), ldc};
    if (bias16.defined()) {
      bias32.resize(static_cast<size_t>(m));
      widen_16bit(kBFloat16, static_cast<const char*>(bias16.data_ptr()), 2, bias32.data(), m);
      bias = bias32.data();
      beta = 0.0;
    } else if (beta != 0.0) {
      const char* c16 = static_cast<const char*>(out.data_ptr());
      parallel_for(0, n, std::max<int64_t>(1, kGrainSize / m), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) widen_16bit(kBFloat16, c16 + i * ldc * 2, 2, c + i * m, m);
      });
    }
  }
  const int64_t c_ld = out.dtype() == kBFloat16 ? m : ldc;
  with_f32_or_bf16(a, [&](auto* a_data) {
    with_f32_or_bf16(b, [&](auto* b_data) {
      sbgemm_unpacked(n, k, m, static_cast<float>(alpha), a_data, a.stride(0), a.stride(1), b_data, b.stride(0),
                      b.stride(1), static_cast<float>(beta), c, c_ld, rounded, bias);
    });
  });
}

}  // namespace

void gemm_mixed(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta, DType products) {
  mixed_product(a, b, out, alpha, beta, products, Tensor());
}

namespace {

// Note [the bias in the float32 sums]: linear's bias, copied into every row of its output for the
// product to add to (beta = 1), costs a bf16 output twice under autocast: the copy rounds it into
// out, and the product widens out back into the float32 sums it rounds from. Here the bias is
// rounded to bf16 once ([m] values, the copy kernel's rounding), widened, and added by the bf16
// kernel as it writes each tile (sbgemm's `bias`), so the result has the same bits and the float32
// sums are never written. mlp_seed:1024 (out 1024 x 512): the copy took 94 us of the step, and
// widening the bias into every row of the sums for the kernel to read back another 30-60.
// Products computed transposed (Note [products computed transposed], sbgemm.cpp) add C
// as they transpose it and keep the copy; so do float64 outputs. Float32 products through
// sgemm_avx512 add the bias as each tile is written (the same bits as the copy, without its pass).
void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, DType products) {
  TG_ASSERT(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && bias.dim() == 1 && bias.size(0) == out.size(1));
  if (out.numel() == 0) return;
  const bool same = a.dtype() == products && b.dtype() == products && out.dtype() == products;
  if (!same) {  // gemm_as's rules (ops/op_helpers.cpp), for the only caller, linear
    for (const Tensor* t : {&a, &b, &out})
      TG_CHECK(t->dtype() == kFloat32 || t->dtype() == products, "linear: no ", products, " products for ", t->dtype(),
               " tensors");
  }
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  if (products == kBFloat16 && out.dtype() == kBFloat16 && n > 1 && m > 1 && k > 0 &&
      !sbgemm_transposed_is_cheaper(n, k, m, b.stride(0), b.stride(1))) {
    const Tensor bias16 = backend::allocate_tensor({m}, kBFloat16, out.device(), "linear");
    copy(bias, bias16);
    mixed_product(a, b, out, 1.0, 1.0, products, bias16);
    return;
  }
  if (same && out.dtype() == kFloat32 && bias.dtype() == kFloat32 && bias.stride(0) == 1 && out.stride(1) == 1 &&
      n > 1 && m > 1 && k > 0 && use_sgemm_avx512(n, m, k)) {  // the bias added as the tiles are written
    sgemm_avx512(n, m, k, 1.0f, static_cast<const float*>(a.data_ptr()), a.stride(0), a.stride(1),
                 static_cast<const float*>(b.data_ptr()), b.stride(0), b.stride(1), 0.0f,
                 static_cast<float*>(out.data_ptr()), std::max<int64_t>(out.stride(0), m),
                 static_cast<const float*>(bias.data_ptr()));
    return;
  }
  copy(bias.expand(out.sizes()), out);
  if (same) {
    gemm(a, b, out, 1.0, 1.0);
  } else {
    gemm_mixed(a, b, out, 1.0, 1.0, products);
  }
}

}  // namespace

// C = A B + beta C, all row-major with unit column stride (gemm_rows.h). One row goes through the
// GEMV paths above (serial when small); the rest through the same GEMMs as gemm().
template <class T>
void gemm_rows_impl(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                    int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  if (m == 1) {  // y = x B, B stored [k, n]: B^T x
    gemv_call<T>(CblasTrans, k, n, 1.0, b, ldb, a, 1, beta, c, 1);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (use_sgemm_avx512(m, n, k)) {
      sgemm_avx512(m, n, k, 1.0f, a, lda, 1, b, ldb, 1, beta, c, ldc);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
  }
}

void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
               float* c, int64_t ldc) {
  gemm_rows_impl<float>(m, n, k, a, lda, b, ldb, beta, c, ldc);
}
void gemm_rows(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
               double* c, int64_t ldc) {
  gemm_rows_impl<double>(m, n, k, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void gemm_rows_bias_impl(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                         const T* bias, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (m > 1 && k > 0 && use_sgemm_avx512(m, n, k)) {
      sgemm_avx512(m, n, k, 1.0f, a, lda, 1, b, ldb, 1, 0.0f, c, ldc, bias);
      return;
    }
  }
  for (int64_t i = 0; i < m; ++i) std::copy_n(bias, n, c + i * ldc);
  gemm_rows_impl<T>(m, n, k, a, lda, b, ldb, T(1), c, ldc);
}

void gemm_rows_bias(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    const float* bias, float* c, int64_t ldc) {
  gemm_rows_bias_impl<float>(m, n, k, a, lda, b, ldb, bias, c, ldc);
}
void gemm_rows_bias(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
                    const double* bias, double* c, int64_t ldc) {
  gemm_rows_bias_impl<double>(m, n, k, a, lda, b, ldb, bias, c, ldc);
}

namespace {

// The same per batch: one BLAS call per matrix (OpenBLAS threads inside each call).
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const int64_t batch = a.size(0);
  for (int64_t i = 0; i < batch; ++i)
    gemm(a.detach().select(0, i), b.detach().select(0, i), out.detach().select(0, i), alpha, beta);
}

}  // namespace

void register_gemm(backend::KernelTable& t) {
  t.gemm = gemm;
  t.gemm_mixed = gemm_mixed;
  t.gemm_bias = gemm_bias;
  t.bmm = bmm;
}

}  // namespace tapegrad::cpu
