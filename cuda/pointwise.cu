// Placeholder: this kernel family is being written; until then its slots stay empty.
#include "cuda_kernels.h"

namespace tapegrad::cuda_backend {

void register_pointwise(backend::KernelTable& table) { table.fill = fill; }

}  // namespace tapegrad::cuda_backend
