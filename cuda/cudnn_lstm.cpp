// Placeholder: this kernel family is being written; until then its slots stay empty.
#include "cuda_kernels.h"

namespace tapegrad::cuda_backend {

void register_cudnn(backend::KernelTable&) {}

}  // namespace tapegrad::cuda_backend
