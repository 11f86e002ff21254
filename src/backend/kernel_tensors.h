// Tensors that kernels make for themselves (scratch space, contiguous copies of operands), built
// on the kernel table alone: no autograd, no op-level checks, and no call back up into the public
// ops, which sit above the backends. The ops allocate their outputs through the same function.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad::backend {

// A new contiguous, uninitialised tensor from the device's allocator; an Error naming `op`, the
// shape and the byte count when it cannot be had.
Tensor allocate_tensor(const Shape& sizes, DType dtype, Device device, const char* op);
// A contiguous copy of t on its own device (always a new tensor), through the copy kernel.
Tensor contiguous_copy(const Tensor& t, const char* op);

// An optional argument's data (null when undefined), as a kernel hands it to its loops.
template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mutable_data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace tapegrad::backend
