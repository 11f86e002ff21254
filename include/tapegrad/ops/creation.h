// Factories: tensors from nothing, from values, from random numbers, or from external memory.
#pragma once

#include <functional>
#include <vector>

#include "tapegrad/core/generator.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Where and how a new tensor is made: tapegrad::zeros({2, 3}, TensorOptions().dtype(kFloat64)).
// A DType or a Device converts to options directly: tapegrad::ones({4}, kInt64).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}
  TensorOptions(Device device) : device_(device) {}
  TensorOptions(const char* device) : device_(device) {}
  TensorOptions& dtype(DType dtype) {
    dtype_ = dtype;
    return *this;
  }
  TensorOptions& device(Device device) {
    device_ = device;
    return *this;
  }
  TensorOptions& requires_grad(bool requires_grad) {
    requires_grad_ = requires_grad;
    return *this;
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;
};

Tensor empty(const Shape& sizes, const TensorOptions& options = {});  // uninitialised
Tensor zeros(const Shape& sizes, const TensorOptions& options = {});
Tensor ones(const Shape& sizes, const TensorOptions& options = {});
Tensor full(const Shape& sizes, double value, const TensorOptions& options = {});
Tensor empty_like(const Tensor& other);
Tensor zeros_like(const Tensor& other);
Tensor ones_like(const Tensor& other);
Tensor full_like(const Tensor& other, double value);

// [start, end) in steps of `step`; the default dtype here is int64 like PyTorch's integer arange.
Tensor arange(double end, const TensorOptions& options = TensorOptions(kInt64));
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& options = TensorOptions(kInt64));
// `steps` evenly spaced values from start to end inclusive.
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options = {});

// Uniform on [0, 1), standard normal, and integers uniform on [low, high). `generator` defaults to
// default_generator().
Tensor rand(const Shape& sizes, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& sizes, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& sizes, const TensorOptions& options = TensorOptions(kInt64),
               Generator* generator = nullptr);
Tensor rand_like(const Tensor& other, Generator* generator = nullptr);
Tensor randn_like(const Tensor& other, Generator* generator = nullptr);
// Fills `out` in place (used by initialisers): uniform on [low, high), normal(mean, std).
Tensor& uniform_(Tensor& out, double low, double high, Generator* generator = nullptr);
Tensor& normal_(Tensor& out, double mean, double std, Generator* generator = nullptr);

// Copies `values` into a new tensor of shape `sizes` (default: 1-D) with options' dtype and device
// (by default T's own dtype on the CPU): tensor<float>({1, 2, 3, 4}, {2, 2}).
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& sizes = {},
              TensorOptions options = TensorOptions(dtype_of<T>::value));
Tensor scalar_tensor(double value, const TensorOptions& options = {});
// A tensor over memory owned by the caller (no copy). `deleter`, if given, runs when the last
// view lets go; without one the caller must keep the memory alive.
Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device = kCPU,
                 std::function<void(void*)> deleter = nullptr);

extern template Tensor tensor<float>(const std::vector<float>&, const Shape&, TensorOptions);
extern template Tensor tensor<double>(const std::vector<double>&, const Shape&, TensorOptions);
extern template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
extern template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);

}  // namespace tapegrad
