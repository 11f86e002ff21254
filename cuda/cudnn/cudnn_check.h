// Every cuDNN call goes through TG_CUDNN_CHECK, which turns a failure into a tapegrad::Error
// naming the op, the call and cuDNN's status string, plus cuDNN's own detail on the last error
// of this thread when it has one (it often says which argument it rejected).
// Shared by cudnn_handle.cpp and cudnn_lstm.cpp.
#pragma once

#include <cudnn.h>

#include <string>

#include "tapegrad/core/error.h"

namespace tapegrad::cuda_backend {

[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* where) {
  char detail_text[512] = {0};
  cudnnGetLastErrorString(detail_text, sizeof(detail_text));
  std::string message = detail::str_cat(where, ": cuDNN call ", call, " failed: ", cudnnGetErrorString(status));
  if (detail_text[0] != '\0') message += detail::str_cat(" (", detail_text, ")");
  detail::throw_error(message);
}

}  // namespace tapegrad::cuda_backend

#define TG_CUDNN_CHECK(call, where)                                                                          \
  do {                                                                                                       \
    cudnnStatus_t status_ = (call);                                                                          \
    if (status_ != CUDNN_STATUS_SUCCESS) ::tapegrad::cuda_backend::throw_cudnn_error(status_, #call, where); \
  } while (0)
