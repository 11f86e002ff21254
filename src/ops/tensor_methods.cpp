// Method forms of the free-function ops, for PyTorch-style chaining: x.relu().sum(); and pinning.
#include <memory>

#include "tapegrad/cuda/memory.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/linalg.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

Tensor Tensor::sum() const {
  return tapegrad::sum(*this);
}
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return tapegrad::sum(*this, dims, keepdim);
}
Tensor Tensor::sum(int64_t dim, bool keepdim) const {
  return tapegrad::sum(*this, Shape{dim}, keepdim);
}
Tensor Tensor::mean() const {
  return tapegrad::mean(*this);
}
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return tapegrad::mean(*this, dims, keepdim);
}
Tensor Tensor::mean(int64_t dim, bool keepdim) const {
  return tapegrad::mean(*this, Shape{dim}, keepdim);
}
Tensor Tensor::max() const {
  return tapegrad::max(*this);
}
Tensor Tensor::min() const {
  return tapegrad::min(*this);
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return tapegrad::argmax(*this, dim, keepdim);
}
Tensor Tensor::exp() const {
  return tapegrad::exp(*this);
}
Tensor Tensor::log() const {
  return tapegrad::log(*this);
}
Tensor Tensor::tanh() const {
  return tapegrad::tanh(*this);
}
Tensor Tensor::sigmoid() const {
  return tapegrad::sigmoid(*this);
}
Tensor Tensor::relu() const {
  return tapegrad::relu(*this);
}
Tensor Tensor::abs() const {
  return tapegrad::abs(*this);
}
Tensor Tensor::sqrt() const {
  return tapegrad::sqrt(*this);
}
Tensor Tensor::pow(double exponent) const {
  return tapegrad::pow(*this, exponent);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return tapegrad::matmul(*this, other);
}
Tensor Tensor::softmax(int64_t dim) const {
  return tapegrad::softmax(*this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  return tapegrad::log_softmax(*this, dim);
}

Tensor Tensor::pin_memory() const {
  TG_CHECK(defined(), "pin_memory: undefined tensor");
  TG_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got a tensor on ", device());
  if (is_pinned()) return *this;
  TG_CHECK(cuda::is_available(), "pin_memory: pinned memory needs a CUDA device, and none is available",
           " (cuda::device_count() == 0, or this build has no CUDA backend)");
  // Checked: an expanded view can count more elements than its storage holds bytes.
  const size_t nbytes = checked_nbytes("pin_memory", sizes(), itemsize());
  auto storage = std::make_shared<Storage>(nbytes, kCPU, cuda::host_allocator());
  Tensor out(std::move(storage), 0, sizes(), contiguous_strides(sizes()), dtype());
  out.copy_(*this);
  return out;
}

bool Tensor::is_pinned() const {
  return defined() && device().is_cpu() && storage()->data() != nullptr && cuda::is_pinned(storage()->data());
}

}  // namespace tapegrad
