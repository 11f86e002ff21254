// A float matrix-vector product of the "columns" kind (y = M^T x, M stored row-major) for CPUs with
// AVX-512, with the output held in registers (Note [register-blocked matrix-vector products] in
// gemv_avx512.cpp). It is the per-step product of an LSTM at batch 1, forward and backward.
#pragma once

#include <cstdint>

namespace tapegrad::cpu {

// Whether this build has the kernel and this CPU can run it (AVX-512F).
bool gemv_avx512_available();

// y[j] = alpha * sum_i M[i, j] x[i] + beta * y[j] for j < cols, M rows x cols row-major with
// leading dimension `lead`, x and y contiguous. Each y[j] sums its rows in order i = 0, 1, ...
// with one rounding per multiply-add. beta = 0 sets y (its old contents are never read). On the
// calling thread. Requires gemv_avx512_available().
void gemv_columns_avx512(int64_t rows, int64_t cols, float alpha, const float* mat, int64_t lead, const float* x,
                         float beta, float* y);

}  // namespace tapegrad::cpu
