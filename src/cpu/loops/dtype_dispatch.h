// Calls a generic lambda with a TypeTag<T> for a runtime DType, so a kernel body is written once
// per type family: dispatch_floating(x.dtype(), "exp", [&](auto tag) { using T = typename decltype(tag)::type; ... });
#pragma once

#include <type_traits>

#include "backend/dtype_dispatch.h"
#include "tapegrad/core/dtype.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/half.h"

namespace tapegrad::cpu {

using backend::TypeTag;

struct CpuDTypes {
  using Half = tapegrad::Half;
  using BFloat16 = tapegrad::BFloat16;
  static void reject(DType dtype, const char* op) {
    TG_CHECK(false, op, ": the cpu backend computes in float32/float64, got ", dtype,
             (dtype == kFloat16 || dtype == kBFloat16) ? " (convert with .to(kFloat32))" : "");
  }
};
using Dispatch = backend::DTypeDispatch<CpuDTypes>;

template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  Dispatch::floating(dtype, op, f);
}

// Floating point plus int32/int64 (arithmetic, comparisons, reductions).
template <class F>
void dispatch_numeric(DType dtype, const char* op, F&& f) {
  Dispatch::numeric(dtype, op, f);
}

// Floating point with the 16-bit floats computed as float: for kernels whose loops widen 16-bit
// operands themselves (for_each_compute and the map_* loops, Note [16-bit operands] in strided_loop.h).
template <class F>
void dispatch_floating_compute(DType dtype, const char* op, F&& f) {
  Dispatch::floating_compute(dtype, op, f);
}

// The same with int32/int64.
template <class F>
void dispatch_numeric_compute(DType dtype, const char* op, F&& f) {
  Dispatch::numeric_compute(dtype, op, f);
}

// Every dtype, 16-bit floats and bool included (copies, fills, index moves).
template <class F>
void dispatch_all(DType dtype, const char* op, F&& f) {
  Dispatch::all(dtype, op, f);
}

// Value conversion between any two element types (16-bit floats go through float).
template <class To, class From>
inline To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return convert<To>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace tapegrad::cpu
