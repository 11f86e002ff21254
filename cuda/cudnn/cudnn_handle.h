// cuDNN handles: one per device and thread, so two threads never share one (a handle is not
// thread-safe) and no call pays for cudnnCreate after the first.
// Shared by cudnn_lstm.cpp (and any later cuDNN family); defined in cudnn_handle.cpp.
#pragma once

#include <cudnn.h>

namespace tapegrad::cuda_backend {

// The calling thread's handle for the current device, bound to current_stream(). Call it at each
// use rather than keeping the handle: the stream may have changed in between. `where` names the
// op in errors.
cudnnHandle_t cudnn_handle(const char* where);

}  // namespace tapegrad::cuda_backend
