// Registers the pointwise family: copies, fills, ranges, Philox draws and the elementwise math.
#include "cuda_kernels.h"
#include "pointwise_kernels.h"

namespace tapegrad::cuda_backend {

void register_pointwise(backend::KernelTable& table) {
  table.copy = copy;
  table.fill = fill;
  table.arange = arange;
  table.uniform = uniform;
  table.normal = normal;
  table.randint = randint;
  table.unary = unary;
  table.unary_backward = unary_backward;
  table.binary = binary;
  table.compare = compare;
  table.binary_scalar = binary_scalar;
  table.compare_scalar = compare_scalar;
  table.where = where;
  table.clamp = clamp;
}

}  // namespace tapegrad::cuda_backend
