// uniform() for float32 with AVX-512: the same numbers as the scalar Philox path (math/philox.h),
// sixteen counters at a time.
#pragma once

#include <cstdint>

namespace tapegrad::cpu {

// Whether this CPU runs uniform_f32_avx512.
bool have_uniform_f32_avx512();

// out[i - begin] = uniform_f32(philox4x32_10(offset + i, seed), low, high) for i in [begin, end),
// bit for bit.
void uniform_f32_avx512(float* out, int64_t begin, int64_t end, double low, double high, uint64_t seed,
                        uint64_t offset);

}  // namespace tapegrad::cpu
