// Blocked matrix transposes on raw memory: the copy kernel's transposing copies, and kernels that
// lay out weights themselves (the LSTM recurrence's per-thread slices).
#pragma once

#include <cstdint>

namespace tapegrad::cpu {

// dst[i * dst_rs + j] = src[i + j * src_cs] for i < rows, j < cols: dst's rows contiguous, src's
// columns. Elements of element_bytes (2, 4 or 8) are moved as bytes, so any type of that size
// will do; returns false (copying nothing) for another size. parallel: over the shared OpenMP pool
// when large enough (never inside a parallel region); otherwise on the calling thread.
bool transpose_2d(const void* src, int64_t src_cs, void* dst, int64_t dst_rs, int64_t rows, int64_t cols,
                  int64_t element_bytes, bool parallel);

}  // namespace tapegrad::cpu
