// cuBLAS handles, one per device and thread, and the check that turns a cuBLAS status into a
// tapegrad::Error. Every use goes through cublas_handle(), which binds the handle to the calling
// thread's current stream and gives it a workspace of its own for that stream.
// Shared by the cuBLAS products (blas.cpp, blas_lt.cpp); defined in cublas_handle.cpp.
#pragma once

#include <cublas_v2.h>

namespace tapegrad::cuda_backend {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* where);

// The calling thread's handle for the current device, ready for work on current_stream().
// Call it again before each product: the stream may have changed since the last one.
cublasHandle_t cublas_handle();

}  // namespace tapegrad::cuda_backend

#define TG_CUBLAS_CHECK(call, where)                                                                           \
  do {                                                                                                         \
    cublasStatus_t status_ = (call);                                                                           \
    if (status_ != CUBLAS_STATUS_SUCCESS) ::tapegrad::cuda_backend::throw_cublas_error(status_, #call, where); \
  } while (0)
