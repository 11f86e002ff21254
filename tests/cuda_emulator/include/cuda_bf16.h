// Emulation build: __nv_bfloat16 as a host type (see cuda_fp16.h).
#pragma once

#include <cstdint>

#include "cuda_emulator/keywords.h"
#include "tapegrad/core/half.h"

struct __nv_bfloat16 {
  uint16_t bits_ = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float value) : bits_(tapegrad::BFloat16(value).bits) {}  // NOLINT: implicit, as CUDA's
  __nv_bfloat16(double value) : __nv_bfloat16(static_cast<float>(value)) {}
  operator float() const {
    tapegrad::BFloat16 b;
    b.bits = bits_;
    return static_cast<float>(b);
  }
};

inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  return __nv_bfloat16(value);
}
inline float __bfloat162float(__nv_bfloat16 value) {
  return static_cast<float>(value);
}
