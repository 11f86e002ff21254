// Tensor metadata and autograd accessors. The ops behind the view, copy and arithmetic methods
// live in src/ops.
#include "tapegrad/core/tensor.h"

#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/node.h"

namespace tapegrad {

namespace {

// A view must lie inside its storage: the public constructor is how a caller wraps a storage, and a
// geometry reaching past it would make every kernel read or write out of bounds. Computed in 128
// bits so that no size or stride can overflow the check itself.
void check_view_in_bounds(const Storage* storage, int64_t offset, const Shape& sizes, const Shape& strides,
                          DType dtype) {
  TG_CHECK(storage != nullptr, "Tensor: a view needs a storage");
  TG_CHECK(sizes.size() == strides.size(), "Tensor: ", sizes.size(), " sizes but ", strides.size(), " strides");
  TG_CHECK(offset >= 0, "Tensor: negative storage offset ", offset);
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TG_CHECK(sizes[i] >= 0, "Tensor: negative size in ", shape_str(sizes));
    TG_CHECK(strides[i] >= 0, "Tensor: negative stride in ", shape_str(strides));
    empty = empty || sizes[i] == 0;
  }
  if (empty) return;
  __int128 last = offset;  // the last element the view reaches
  for (size_t i = 0; i < sizes.size(); ++i) last += static_cast<__int128>(sizes[i] - 1) * strides[i];
  const __int128 needed = (last + 1) * static_cast<__int128>(dtype_size(dtype));
  TG_CHECK(needed <= static_cast<__int128>(storage->nbytes()), "Tensor: a view of shape ", shape_str(sizes),
           ", strides ", shape_str(strides), " and offset ", offset, " reaches past its storage of ", storage->nbytes(),
           " bytes");
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape sizes, Shape strides, DType dtype)
    : impl_(std::make_shared<TensorImpl>()) {
  check_view_in_bounds(storage.get(), offset, sizes, strides, dtype);
  impl_->storage = std::move(storage);
  impl_->offset = offset;
  impl_->sizes = std::move(sizes);
  impl_->strides = std::move(strides);
  impl_->dtype = dtype;
}

const TensorImpl& Tensor::checked() const {
  TG_CHECK(impl_ != nullptr, "tensor: this tensor is undefined (default-constructed or a missing gradient)");
  return *impl_;
}

int64_t Tensor::size(int64_t dim) const {
  return sizes()[wrap_dim("size", dim, this->dim())];
}
int64_t Tensor::stride(int64_t dim) const {
  return strides()[wrap_dim("stride", dim, this->dim())];
}

bool Tensor::is_contiguous() const {
  const Shape& sz = sizes();
  const Shape& st = strides();
  if (shape_numel(sz) == 0) return true;  // no element to be out of place (as PyTorch)
  int64_t expected = 1;
  for (size_t i = sz.size(); i-- > 0;) {
    if (sz[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = checked();
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

bool Tensor::is_inference() const {
  return checked().storage->is_inference();
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  const TensorImpl& t = checked();
  TG_CHECK(!(requires_grad && t.storage->is_inference() && !autograd::inference_mode_enabled()),
           "requires_grad_: an inference tensor (made under InferenceMode) ", shape_str(t.sizes),
           " cannot require grad outside InferenceMode; clone() it first");
  TG_CHECK(t.grad_fn == nullptr || requires_grad,
           "requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()");
  TG_CHECK(!requires_grad || tapegrad::is_floating_point(t.dtype),
           "requires_grad_: only floating-point tensors can require gradients, got ", t.dtype);
  impl_->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = checked();
  std::lock_guard<std::mutex> lock(t.autograd_mutex);  // Note [shared leaves]
  return t.grad ? Tensor(t.grad) : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  checked();
  if (grad.defined()) {
    TG_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(), "set_grad: gradient ",
             shape_str(grad.sizes()), " ", grad.dtype(), " on ", grad.device(), " does not match tensor ",
             shape_str(sizes()), " ", dtype(), " on ", device());
  }
  std::lock_guard<std::mutex> lock(impl_->autograd_mutex);  // Note [shared leaves]
  impl_->grad = grad.impl_ptr();
}

void Tensor::retain_grad() const {
  const TensorImpl& t = checked();
  TG_CHECK(t.requires_grad, "retain_grad: the tensor does not require grad");
  if (t.grad_fn == nullptr || t.retains_grad) return;  // leaves keep their grad anyway
  impl_->retains_grad = true;
  t.grad_fn->retain_output_grad(t.output_nr, impl_);
}

void Tensor::set_data(const Tensor& data) const {
  checked();
  TG_CHECK(data.defined(), "set_data: the new data is undefined");
  TG_CHECK(!impl_->requires_grad || tapegrad::is_floating_point(data.dtype()),
           "set_data: a tensor that requires grad needs floating-point data, got ", data.dtype());
  impl_->storage = data.storage();
  impl_->offset = data.storage_offset();
  impl_->sizes = data.sizes();
  impl_->strides = data.strides();
  impl_->dtype = data.dtype();
  std::lock_guard<std::mutex> lock(impl_->autograd_mutex);  // Note [shared leaves]
  impl_->grad = nullptr;
  // Graphs recorded from now on get an accumulator that knows the new shape and dtype.
  impl_->grad_accumulator.reset();
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked();
  Tensor out(t.storage, t.offset, t.sizes, t.strides, t.dtype);
  out.impl_->is_view = t.is_view;
  return out;
}

}  // namespace tapegrad
