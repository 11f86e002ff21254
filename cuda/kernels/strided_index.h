// Maps the linear (row-major) index of an element to its element offset in a strided tensor, on
// the device. Passed to kernels by value; dims are coalesced on the host first so the common
// cases (contiguous, one broadcast dim) cost one or two divisions per element.
// Used by pointwise_loop.cuh; a header of its own for any kernel that walks strided tensors.
#pragma once

#include <cstdint>

#include "math/host_device.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::cuda_backend {

constexpr int kMaxIndexDims = 12;

struct StridedIndex {
  int ndim = 0;
  int64_t sizes[kMaxIndexDims];    // innermost first
  int64_t strides[kMaxIndexDims];  // in elements

  TG_HD int64_t offset(int64_t linear) const {
    if (ndim == 1) return linear * strides[0];  // contiguous or fully broadcast: no division
    int64_t off = 0;
    for (int d = 0; d < ndim; ++d) {
      int64_t i = linear % sizes[d];
      linear /= sizes[d];
      off += i * strides[d];
    }
    return off;
  }
};

// The index of `t` walked in the row-major order of `shape` (t's own shape, or the output shape
// that t has been expanded to). Size-1 dims are dropped; contiguous neighbours are merged.
inline StridedIndex make_strided_index(const Tensor& t) {
  StridedIndex index;
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (index.ndim > 0 && strides[d] == index.strides[index.ndim - 1] * index.sizes[index.ndim - 1]) {
      index.sizes[index.ndim - 1] *= sizes[d];
      continue;
    }
    TG_CHECK(index.ndim < kMaxIndexDims, "cuda kernels support tensors of at most ", kMaxIndexDims,
             " non-mergeable dims, got shape ", shape_str(sizes));
    index.sizes[index.ndim] = sizes[d];
    index.strides[index.ndim] = strides[d];
    ++index.ndim;
  }
  return index;
}

}  // namespace tapegrad::cuda_backend
