// Emulation build: the 16-bit float types of cuda_fp16.h/cuda_bf16.h as host types. Conversions
// round to nearest even, bit for bit as the GPU's __float2half_rn / __float2bfloat16_rn and as
// tapegrad's own CPU types (tapegrad/core/half.h, whose conversions these reuse).
#pragma once

#include <cstdint>

#include "cuda_emulator/keywords.h"
#include "tapegrad/core/half.h"

struct __half {
  uint16_t bits_ = 0;
  __half() = default;
  __half(float value) : bits_(tapegrad::Half(value).bits) {}  // NOLINT: implicit, as CUDA's
  __half(double value) : __half(static_cast<float>(value)) {}
  operator float() const {
    tapegrad::Half h;
    h.bits = bits_;
    return static_cast<float>(h);
  }
};

inline __half __float2half_rn(float value) {
  return __half(value);
}
inline float __half2float(__half value) {
  return static_cast<float>(value);
}
