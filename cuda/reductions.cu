// The reduction family: reduce, max/min with index, softmax, layer_norm, cross-entropy and the index
// ops. The kernels live in reduce.cu, softmax.cu, layer_norm.cu, cross_entropy.cu and indexing.cu.
#include "cuda_kernels.h"
#include "reduction_kernels.h"

namespace tapegrad::cuda_backend {

void register_reductions(backend::KernelTable& table) {
  table.reduce = reduce;
  table.reduce_with_index = reduce_with_index;
  table.softmax = softmax;
  table.softmax_backward = softmax_backward;
  table.layer_norm = layer_norm;
  table.layer_norm_backward = layer_norm_backward;
  table.cross_entropy = cross_entropy;
  table.cross_entropy_backward = cross_entropy_backward;
  table.index_select = index_select;
  table.index_add = index_add;
  table.gather = gather;
  table.scatter_add = scatter_add;
  table.check_values = check_values;
}

}  // namespace tapegrad::cuda_backend
