// The device-side counterpart of cpu/loops/dtype_dispatch.h, on the same switches
// (backend/dtype_dispatch.h): calls a generic lambda with TypeTag<T> for the CUDA element type of a
// runtime DType (__half and __nv_bfloat16 for the 16-bit floats).
// Arithmetic on 16-bit floats goes through float: Acc<T> names the type to compute in.
// Shared by every kernel family.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/dtype_dispatch.h"
#include "tapegrad/core/dtype.h"
#include "tapegrad/core/error.h"

namespace tapegrad::cuda_backend {

using backend::TypeTag;

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, float, T>;

struct CudaDTypes {
  using Half = __half;
  using BFloat16 = __nv_bfloat16;
  static void reject(DType dtype, const char* op) {
    TG_CHECK(false, op, ": the cuda backend computes this op in float32/float64, got ", dtype);
  }
};
using Dispatch = backend::DTypeDispatch<CudaDTypes>;

template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  Dispatch::floating(dtype, op, f);
}

// f32, f64, f16, bf16 (the 16-bit ones computed in float).
template <class F>
void dispatch_floating_and_half(DType dtype, const char* op, F&& f) {
  Dispatch::floating_and_half(dtype, op, f);
}

// The above plus int32/int64.
template <class F>
void dispatch_numeric(DType dtype, const char* op, F&& f) {
  Dispatch::numeric_and_half(dtype, op, f);
}

template <class F>
void dispatch_all(DType dtype, const char* op, F&& f) {
  Dispatch::all(dtype, op, f);
}

// Value conversion between element types on the device (16-bit floats through float).
template <class To, class From>
__host__ __device__ __forceinline__ To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, __half> || std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace tapegrad::cuda_backend
