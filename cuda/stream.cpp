// Placeholder until streams land: every kernel runs on the legacy default stream.
#include "launch.h"

namespace tapegrad::cuda_backend {

cudaStream_t current_stream() { return nullptr; }

}  // namespace tapegrad::cuda_backend
