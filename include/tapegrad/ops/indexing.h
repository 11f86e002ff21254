// Indexing ops. Index tensors are int64 (int32 is accepted); out-of-range indices throw.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Rows (along `dim`) of x picked by a 1-D index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[index[i][j]][j] (for dim 0), index has x's rank.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src added at the places index names along dim (duplicates accumulate).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// A copy of x with src's slices added at rows `index` along dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// weight [num_embeddings, dim] looked up by integer indices of any shape -> [..., dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace tapegrad
