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

// The same product restricted to `segments` (1 to 4) blocks of `cols` columns: for s < segments
// and j < cols, y[s * y_stride + j] = sum_i v[i] M[i, s * stride + j] + beta * y[s * y_stride + j],
// where v is x1 (rows1 entries) followed by x2 (rows2 entries) and M (rows1 + rows2 rows, leading
// dimension `lead`) starts at `mat`. Each y element has the bits gemv_columns_avx512 gives it with
// alpha = 1 and v contiguous (Note [segmented columns]). On the calling thread.
void gemv_segmented_columns_avx512(int64_t rows1, const float* x1, int64_t rows2, const float* x2, int segments,
                                   int64_t cols, const float* mat, int64_t lead, int64_t stride, float beta, float* y,
                                   int64_t y_stride);

// The same chains carried on: each y element holds the accumulator of a chain over earlier rows
// (as the call above leaves it with beta = 0), and the chain continues over these `rows` rows of M
// with x; then `addend` (null: nothing) is added, laid out as y is. A chain split this way has the
// bits of the unsplit chain, and with addend = the bias those of the call above with the bias in y
// and beta = 1 (the one rounding of bias + acc either way).
void gemv_segmented_columns_continue_avx512(int64_t rows, const float* x, int segments, int64_t cols, const float* mat,
                                            int64_t lead, int64_t stride, const float* addend, float* y,
                                            int64_t y_stride);

}  // namespace tapegrad::cpu
