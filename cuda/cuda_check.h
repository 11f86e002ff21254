// Every CUDA runtime call goes through TG_CUDA_CHECK, which turns a failure into a tapegrad::Error
// naming the call and CUDA's own description of the status.
#pragma once

#include <cuda_runtime.h>

#include "tapegrad/core/error.h"

namespace tapegrad::cuda_backend {

// Clears the thread's last-error state first: CUDA keeps a failed call's status until
// cudaGetLastError() reads it, and the next launch check would report this failure again.
[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* where) {
  (void)cudaGetLastError();
  detail::throw_error(detail::str_cat(where, ": CUDA call ", call, " failed: ", cudaGetErrorName(status), " (",
                                      cudaGetErrorString(status), ")"));
}

}  // namespace tapegrad::cuda_backend

#define TG_CUDA_CHECK(call, where)                                                      \
  do {                                                                                  \
    cudaError_t status_ = (call);                                                       \
    if (status_ != cudaSuccess) ::tapegrad::cuda_backend::throw_cuda_error(status_, #call, where); \
  } while (0)

// After a kernel launch: a bad configuration is reported at once, not at the next sync.
#define TG_CUDA_CHECK_LAUNCH(where) TG_CUDA_CHECK(cudaGetLastError(), where)
