// Vectorised float32 <-> bfloat16 / float16 conversions for contiguous copies (convert_16bit.cpp).
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// dst = src converted, when both are contiguous and the pair of dtypes is one of float32 to or from
// bfloat16 or float16 and the CPU has AVX-512; returns false (and does nothing) otherwise. The bits
// are those of the scalar conversions.
bool copy_16bit_contiguous(const Tensor& src, const Tensor& dst);

// n elements of a float16 or bfloat16 array (`stride` bytes apart: 2 is contiguous, 0 repeats one
// value) widened into floats, and floats rounded into one: the blocks of Note [16-bit operands]
// (strided_loop.h). Vectorised where contiguous and the CPU has AVX-512, with the same bits.
void widen_16bit(DType from, const char* src, int64_t stride, float* dst, int64_t n);
void narrow_16bit(DType to, const float* src, char* dst, int64_t stride, int64_t n);

}  // namespace tapegrad::cpu
