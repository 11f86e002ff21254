// layer_norm as one op: the input is seen as [rows, cols] (cols = the normalised dims), one fused
// kernel writes the output with each row's mean and rstd, and those are saved for the backward
// kernel, as PyTorch's native_layer_norm does, so backward needs no second pass for statistics.
#include <algorithm>
#include <cmath>
#include <string>

#include "amp/policy.h"
#include "ops/op_helpers.h"
#include "tapegrad/ops/normalization.h"

namespace tapegrad {

using namespace ops;

namespace {

void check_parameter(const Tensor& input, const Shape& normalized_shape, const Tensor& t, const char* what) {
  if (!t.defined()) return;
  TG_CHECK(t.sizes() == normalized_shape, "layer_norm: ", what, " of shape ", shape_str(t.sizes()),
           " does not match normalized_shape ", shape_str(normalized_shape));
  TG_CHECK(t.dtype() == input.dtype(), "layer_norm: ", what, " has dtype ", t.dtype(), ", the input ", input.dtype());
  check_same_device("layer_norm", input, t);
}

// "[*, 4, 5]" for normalized_shape [4, 5].
std::string expected_input(const Shape& normalized_shape) {
  std::string s = shape_str(normalized_shape);
  return "[*, " + s.substr(1);
}

// A contiguous [n] view of a parameter (undefined stays undefined).
Tensor flat_parameter(const Tensor& t, int64_t n) {
  return t.defined() ? t.detach().contiguous().reshape({n}) : Tensor();
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::layer_norm, {&input, &weight, &bias}).float32)
    return layer_norm((*f)[0], normalized_shape, (*f)[1], (*f)[2], eps);
  check_defined("layer_norm", input);
  TG_CHECK(!normalized_shape.empty(), "layer_norm: normalized_shape must have at least one dim, got []");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TG_CHECK(input.dim() >= k && std::equal(normalized_shape.begin(), normalized_shape.end(), input.sizes().end() - k),
           "layer_norm: given normalized_shape=", shape_str(normalized_shape), ", expected input with shape ",
           expected_input(normalized_shape), ", got ", shape_str(input.sizes()));
  check_floating("layer_norm", input);
  check_parameter(input, normalized_shape, weight, "weight");
  check_parameter(input, normalized_shape, bias, "bias");
  TG_CHECK(eps > 0 && std::isfinite(eps), "layer_norm: eps must be positive and finite, got ", eps);

  const Device device = input.device();
  const DType dtype = input.dtype();
  // The statistics are kept in the compute type (float32 for 16-bit inputs), like PyTorch's.
  const DType stat_dtype = dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype;
  const int64_t cols = shape_numel(normalized_shape);
  const int64_t rows = shape_numel(Shape(input.sizes().begin(), input.sizes().end() - k));
  Tensor x = input.detach().contiguous().reshape({rows, cols});
  Tensor w = flat_parameter(weight, cols), b = flat_parameter(bias, cols);
  Tensor out = empty_tensor(input.sizes(), dtype, device);
  Tensor mean = empty_tensor({rows}, stat_dtype, device), rstd = empty_tensor({rows}, stat_dtype, device);
  if (rows > 0 && cols > 0) TG_KERNEL(device, layer_norm)(x, w, b, eps, out.reshape({rows, cols}), mean, rstd);

  if (any_requires_grad({input, weight, bias})) {
    const bool need_x = input.requires_grad();
    const bool need_w = weight.defined() && weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    SavedTensor saved_x = x, saved_mean = mean, saved_rstd = rstd;
    SavedTensor saved_w = need_x && w.defined() ? SavedTensor(w) : SavedTensor();
    const Shape input_shape = input.sizes();
    record("layer_norm", {input, weight, bias}, {out}, [=](const std::vector<Tensor>& g) {
      const Device dev = g[0].device();
      Tensor grad_x = need_x ? empty_tensor(input_shape, dtype, dev) : Tensor();
      Tensor grad_w = need_w ? empty_tensor(normalized_shape, dtype, dev) : Tensor();
      Tensor grad_b = need_b ? empty_tensor(normalized_shape, dtype, dev) : Tensor();
      if (rows > 0 && cols > 0) {
        auto backward = TG_KERNEL(dev, layer_norm_backward);
        backward(g[0].contiguous().reshape({rows, cols}), saved_x.get(), saved_mean.get(), saved_rstd.get(),
                 saved_w.defined() ? saved_w.get() : Tensor(),
                 grad_x.defined() ? grad_x.reshape({rows, cols}) : Tensor(), flat_parameter(grad_w, cols),
                 flat_parameter(grad_b, cols));
      } else {
        // No rows: the parameter gradients are empty sums.
        if (grad_w.defined() && grad_w.numel() > 0) TG_KERNEL(dev, fill)(grad_w, 0.0);
        if (grad_b.defined() && grad_b.numel() > 0) TG_KERNEL(dev, fill)(grad_b, 0.0);
      }
      return std::vector<Tensor>{grad_x, grad_w, grad_b};
    });
  }
  return out;
}

}  // namespace tapegrad
