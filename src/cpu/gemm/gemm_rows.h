// Matrix products on raw row-major pointers, for kernels that run their own loops around many
// small products (the LSTM recurrence). Inside a parallel region they run on the calling thread
// (OpenBLAS and sgemm_avx512 both keep to one thread there); outside it they may thread.
#pragma once

#include <cstdint>

namespace tapegrad::cpu {

// C = A B + beta C. A is m x k, B is k x n, C is m x n; rows lda, ldb, ldc elements apart and
// columns contiguous. beta = 0 sets C (its old contents are never read).
void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
               float* c, int64_t ldc);
void gemm_rows(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
               double* c, int64_t ldc);

// C = A B + bias: the n values of bias added to every row (a layer's bias, in place of copying it into
// C and passing beta = 1, with the same bits). Float products through sgemm_avx512 add it as each
// tile is written; the others copy it in first.
void gemm_rows_bias(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    const float* bias, float* c, int64_t ldc);
void gemm_rows_bias(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb,
                    const double* bias, double* c, int64_t ldc);

}  // namespace tapegrad::cpu
