// Calls a generic lambda with a TypeTag<T> for a runtime DType, so a kernel body is written once per
// type family. The switches are the same on every backend; only the 16-bit element types and the
// wording of the error for a dtype an op does not take differ, so each backend instantiates
// DTypeDispatch with its own (cpu/loops/dtype_dispatch.h, cuda/kernels/dispatch.h).
#pragma once

#include <cstdint>

#include "tapegrad/core/dtype.h"

namespace tapegrad::backend {

template <class T>
struct TypeTag {
  using type = T;
};

// Types provides `Half` and `BFloat16` (the backend's 16-bit element types) and
// `static void reject(DType dtype, const char* op)`, which throws for a dtype the op does not take.
template <class Types>
struct DTypeDispatch {
  // f32, f64.
  template <class F>
  static void floating(DType dtype, const char* op, F&& f) {
    switch (dtype) {
      case DType::Float32:
        f(TypeTag<float>{});
        return;
      case DType::Float64:
        f(TypeTag<double>{});
        return;
      default:
        Types::reject(dtype, op);
    }
  }

  // f32, f64 and the 16-bit floats as the backend's own 16-bit types.
  template <class F>
  static void floating_and_half(DType dtype, const char* op, F&& f) {
    switch (dtype) {
      case DType::Float16:
        f(TypeTag<typename Types::Half>{});
        return;
      case DType::BFloat16:
        f(TypeTag<typename Types::BFloat16>{});
        return;
      default:
        floating(dtype, op, f);
    }
  }

  // f32, f64 and the 16-bit floats computed as float, for loops that widen 16-bit operands themselves.
  template <class F>
  static void floating_compute(DType dtype, const char* op, F&& f) {
    if (dtype == DType::Float16 || dtype == DType::BFloat16) return f(TypeTag<float>{});
    floating(dtype, op, f);
  }

  // f32, f64, int32, int64.
  template <class F>
  static void numeric(DType dtype, const char* op, F&& f) {
    if (!integral(dtype, f)) floating(dtype, op, f);
  }

  // numeric() plus the 16-bit floats as the backend's own 16-bit types.
  template <class F>
  static void numeric_and_half(DType dtype, const char* op, F&& f) {
    if (!integral(dtype, f)) floating_and_half(dtype, op, f);
  }

  // numeric() plus the 16-bit floats computed as float.
  template <class F>
  static void numeric_compute(DType dtype, const char* op, F&& f) {
    if (!integral(dtype, f)) floating_compute(dtype, op, f);
  }

  // Every dtype, 16-bit floats (as the backend's own types) and bool included.
  template <class F>
  static void all(DType dtype, const char* op, F&& f) {
    if (dtype == DType::Bool) {
      f(TypeTag<bool>{});
      return;
    }
    numeric_and_half(dtype, op, f);
  }

 private:
  // Calls f for int32/int64; false for any other dtype.
  template <class F>
  static bool integral(DType dtype, F& f) {
    switch (dtype) {
      case DType::Int32:
        f(TypeTag<int32_t>{});
        return true;
      case DType::Int64:
        f(TypeTag<int64_t>{});
        return true;
      default:
        return false;
    }
  }
};

}  // namespace tapegrad::backend
