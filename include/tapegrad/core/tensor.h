// Tensor: a strided view (offset, sizes, strides, dtype) of a Storage, plus its autograd state.
//
// A Tensor is a cheap handle: copies share the same tensor (like torch::Tensor). Views share
// storage with their base; a write through a view is seen by the base.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "tapegrad/core/device.h"
#include "tapegrad/core/dtype.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/shape.h"
#include "tapegrad/core/storage.h"

namespace tapegrad {

namespace autograd {
class Node;
struct PostAccumulateGradHooks;  // see tapegrad/autograd/hooks.h
}  // namespace autograd
class Tensor;

// The state behind a Tensor handle. Library code builds these through Tensor's constructors.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape sizes;
  Shape strides;  // in elements
  DType dtype = kFloat32;
  bool is_view = false;  // shares storage with another tensor created by a view op

  // Autograd state. A tensor with requires_grad and no grad_fn is a leaf.
  // Note [shared leaves]: several threads may record ops on one leaf (a shared parameter) and
  // backpropagate into it at once, so `grad` and `grad_accumulator` are read and written only
  // under `autograd_mutex` (one uncontended lock per gradient edge made and per accumulation).
  mutable std::mutex autograd_mutex;
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;         // the node that produced this tensor, if any
  int output_nr = 0;                               // which output of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator;  // cached for leaves
  std::shared_ptr<autograd::PostAccumulateGradHooks> post_accumulate_grad_hooks;  // leaves only; may be null
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A view of `storage`; no data is copied. Throws tapegrad::Error when a size, a stride or the
  // offset is negative, or the view reaches past the storage's bytes.
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes, Shape strides, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // --- Metadata ---------------------------------------------------------------------------
  const Shape& sizes() const { return checked().sizes; }
  const Shape& shape() const { return sizes(); }
  const Shape& strides() const { return checked().strides; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t numel() const { return shape_numel(sizes()); }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  size_t itemsize() const { return dtype_size(dtype()); }
  int64_t storage_offset() const { return checked().offset; }
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  bool is_contiguous() const;
  bool is_floating_point() const { return tapegrad::is_floating_point(dtype()); }
  // Address of the first element (storage base + offset).
  void* data_ptr() const;
  // Typed address of the first element; throws if T does not match dtype().
  template <class T>
  T* data() const;

  // --- Autograd ---------------------------------------------------------------------------
  bool requires_grad() const { return checked().requires_grad; }
  // Marks a leaf as needing gradients. Only floating-point tensors can require grad.
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient (undefined until a backward pass reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;  // an undefined tensor clears it
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  // Its storage was made under InferenceMode: it can never enter autograd (a view of a normal
  // tensor is normal wherever it is made). tapegrad/autograd/grad_mode.h.
  bool is_inference() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked().grad_fn; }
  // Asks a non-leaf to keep its .grad() after backward.
  void retain_grad() const;
  // Backpropagates from this tensor. A non-scalar needs `gradient` of the same shape.
  // Without retain_graph the graph's saved tensors are freed as it is replayed.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // A tensor sharing this one's storage, cut from the graph (requires_grad = false).
  Tensor detach() const;
  // Points this tensor (and every handle to it) at `data`'s storage and geometry, keeping its
  // autograd flags; the gradient is cleared. Used to move or convert parameters in place.
  void set_data(const Tensor& data) const;

  // --- Views (no copy; recorded by autograd) -----------------------------------------------
  Tensor view(const Shape& sizes) const;     // one dim may be -1; strides must allow it
  Tensor reshape(const Shape& sizes) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a matrix (dim <= 2)
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // Python's a[start:end:step]
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& sizes) const;  // -1 keeps a size; new dims are prepended
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor contiguous() const;  // itself when already contiguous

  // --- Conversion and copies -----------------------------------------------------------------
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(kCPU); }
  // A contiguous copy of this CPU tensor in pinned (page-locked) host memory, from which copies to
  // a GPU are asynchronous (see tapegrad/cuda/memory.h); itself when already pinned. Recorded by
  // autograd like a copy. Throws tapegrad::Error for a non-CPU tensor and when no CUDA device is
  // available (or the build has no CUDA backend).
  Tensor pin_memory() const;
  // True when this is a CPU tensor whose storage is pinned host memory.
  bool is_pinned() const;
  Tensor clone() const;
  // Copies (and converts) src into this tensor, broadcasting src; works across devices.
  Tensor& copy_(const Tensor& src);
  // The single value of a one-element tensor.
  template <class T>
  T item() const;
  double item() const { return item<double>(); }
  // Contents as a flat vector in logical (row-major) order, converted to T.
  template <class T>
  std::vector<T> tolist() const;
  std::string str() const;  // PyTorch-like printing

  // --- In-place ---------------------------------------------------------------------------------
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double other);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(double other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double other);
  Tensor& clamp_(double min, double max);

  // --- Method forms of common ops (see tapegrad/ops) ------------------------------------------
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor abs() const;
  Tensor sqrt() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// Operators follow broadcasting and type promotion (see tapegrad/ops/elementwise.h).
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);

// Maps a C++ element type to its DType (float -> kFloat32, ...).
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = kFloat32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = kFloat64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = kInt32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = kInt64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = kBool;
};

template <class T>
T* Tensor::data() const {
  TG_CHECK(dtype() == dtype_of<T>::value, "data<T>: tensor has dtype ", dtype(), ", asked for ", dtype_of<T>::value);
  return static_cast<T*>(data_ptr());
}

}  // namespace tapegrad
