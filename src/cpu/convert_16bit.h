// Vectorised float32 <-> bfloat16 / float16 conversions for contiguous copies (convert_16bit.cpp).
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// dst = src converted, when both are contiguous and the pair of dtypes is one of float32 to or from
// bfloat16 or float16 and the CPU has AVX-512; returns false (and does nothing) otherwise. The bits
// are those of the scalar conversions.
bool copy_16bit_contiguous(const Tensor& src, const Tensor& dst);

}  // namespace tapegrad::cpu
