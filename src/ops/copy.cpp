// Copies and conversions: clone, to(device, dtype), copy_, item, tolist, fill_ and zero_.
#include <cstring>

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {

using namespace ops;

namespace {

// dst <- src for tensors of one shape on any devices, converting dtype.
void copy_any(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  if (src.device() == dst.device()) {
    TG_KERNEL(dst.device(), copy)(src, dst);
    return;
  }
  if (src.device().is_cpu()) {
    // Convert on the host, then one contiguous transfer. A source that needs no conversion goes
    // as it is, so a pinned one keeps its asynchronous copy.
    Tensor staged = src;
    if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
      staged = empty_tensor(src.sizes(), dst.dtype(), kCPU);
      TG_KERNEL(kCPU, copy)(src, staged);
    }
    if (dst.is_contiguous()) {
      TG_KERNEL(dst.device(), copy_from_cpu)(staged, dst);
    } else {
      Tensor tmp = empty_tensor(dst.sizes(), dst.dtype(), dst.device());
      TG_KERNEL(dst.device(), copy_from_cpu)(staged, tmp);
      TG_KERNEL(dst.device(), copy)(tmp, dst);
    }
    return;
  }
  if (dst.device().is_cpu()) {
    Tensor device_side = src;
    if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
      device_side = empty_tensor(src.sizes(), dst.dtype(), src.device());
      TG_KERNEL(src.device(), copy)(src, device_side);
    }
    Tensor staged = dst.is_contiguous() ? dst : empty_tensor(dst.sizes(), dst.dtype(), kCPU);
    TG_KERNEL(src.device(), copy_to_cpu)(device_side, staged);
    if (!staged.is_same(dst)) TG_KERNEL(kCPU, copy)(staged, dst);
    return;
  }
  // Between two accelerators: through the host.
  Tensor host = empty_tensor(src.sizes(), src.dtype(), kCPU);
  copy_any(src, host);
  copy_any(host, dst);
}

}  // namespace

Tensor Tensor::clone() const {
  Tensor out = empty_tensor(sizes(), dtype(), device());
  copy_any(*this, out);
  if (any_requires_grad({*this})) {
    record("clone", {*this}, {out}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  }
  return out;
}

Tensor Tensor::to(Device device, DType dtype) const {
  if (device == this->device() && dtype == this->dtype()) return *this;
  Tensor out = empty_tensor(sizes(), dtype, device);
  copy_any(*this, out);
  if (any_requires_grad({*this}) && tapegrad::is_floating_point(dtype)) {
    Device from_device = this->device();
    DType from_dtype = this->dtype();
    record("to", {*this}, {out}, [from_device, from_dtype](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0].to(from_device, from_dtype)};
    });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  return to(device, dtype());
}
Tensor Tensor::to(DType dtype) const {
  return to(device(), dtype);
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined("copy_", src, "source");
  Shape shape = broadcast_shapes("copy_", src.sizes(), sizes());
  TG_CHECK(shape == sizes(), "copy_: source of shape ", shape_str(src.sizes()), " cannot be broadcast to ",
           shape_str(sizes()));
  check_inplace("copy_", *this, src);
  bool track = any_requires_grad({src}) || (autograd::grad_enabled() && requires_grad());
  // Copying from memory that overlaps the destination must read everything first.
  Tensor source = src.storage() == storage() ? src.detach().clone() : src.detach();
  copy_any(expand_raw(source, sizes()), *this);
  storage()->bump_version();
  if (track) {
    Shape src_shape = src.sizes();
    DType src_dtype = src.dtype();
    Device src_device = src.device();
    Tensor self = *this;
    autograd::record("copy_", {self, src}, {self}, [=](const std::vector<Tensor>& g) {
      Tensor g_src = sum_to(g[0], src_shape).to(src_device, src_dtype);
      return std::vector<Tensor>{Tensor(), g_src};  // the old contents were overwritten
    });
  }
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  TG_KERNEL(device(), fill)(*this, value);
  storage()->bump_version();
  if (autograd::grad_enabled() && requires_grad()) {
    Tensor self = *this;
    autograd::record("fill_", {self}, {self}, [](const std::vector<Tensor>&) { return std::vector<Tensor>{Tensor()}; });
  }
  return *this;
}

Tensor& Tensor::zero_() {
  return fill_(0.0);
}

template <class T>
std::vector<T> Tensor::tolist() const {
  Tensor host = empty_tensor(sizes(), dtype_of<T>::value, kCPU);
  copy_any(detach(), host);
  std::vector<T> values(static_cast<size_t>(numel()));
  if (!values.empty()) std::memcpy(values.data(), host.data_ptr(), values.size() * sizeof(T));
  return values;
}

template <class T>
T Tensor::item() const {
  TG_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(sizes()));
  return tolist<T>()[0];
}

template std::vector<float> Tensor::tolist<float>() const;
template std::vector<double> Tensor::tolist<double>() const;
template std::vector<int32_t> Tensor::tolist<int32_t>() const;
template std::vector<int64_t> Tensor::tolist<int64_t>() const;
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int32_t Tensor::item<int32_t>() const;
template int64_t Tensor::item<int64_t>() const;

}  // namespace tapegrad
