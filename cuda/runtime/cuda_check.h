// Every CUDA runtime call goes through TG_CUDA_CHECK, which turns a failure into a tapegrad::Error
// naming the call and CUDA's own description of the status.
// Shared by every file that calls the CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include "tapegrad/core/error.h"

namespace tapegrad::cuda_backend {

// graph.cpp: remembers the first call of the thread's running capture that could not be captured
// (Note [capture failures]).
void note_capture_failure(const char* where, const char* call, cudaError_t status);

// The statuses with which CUDA refuses a call during stream capture.
inline bool is_capture_error(cudaError_t status) {
  return status == cudaErrorStreamCaptureUnsupported || status == cudaErrorStreamCaptureInvalidated ||
         status == cudaErrorStreamCaptureImplicit || status == cudaErrorStreamCaptureIsolation ||
         status == cudaErrorCapturedEvent;
}

// Clears the thread's last-error state first: CUDA keeps a failed call's status until
// cudaGetLastError() reads it, and the next launch check would report this failure again.
[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* where) {
  (void)cudaGetLastError();
  if (is_capture_error(status)) {
    note_capture_failure(where, call, status);
    detail::throw_error(detail::str_cat(where, ": CUDA call ", call, " failed during CUDA graph capture: ",
                                        cudaGetErrorName(status), " (", cudaGetErrorString(status), "). ", where,
                                        " waits for the GPU or copies pageable host memory, which a captured region "
                                        "may not do (see docs/cuda_graphs.md)"));
  }
  detail::throw_error(detail::str_cat(where, ": CUDA call ", call, " failed: ", cudaGetErrorName(status), " (",
                                      cudaGetErrorString(status), ")"));
}

}  // namespace tapegrad::cuda_backend

#define TG_CUDA_CHECK(call, where)                                                                 \
  do {                                                                                             \
    cudaError_t status_ = (call);                                                                  \
    if (status_ != cudaSuccess) ::tapegrad::cuda_backend::throw_cuda_error(status_, #call, where); \
  } while (0)

// After a kernel launch: a bad configuration is reported at once, not at the next sync.
#define TG_CUDA_CHECK_LAUNCH(where) TG_CUDA_CHECK(cudaGetLastError(), where)
