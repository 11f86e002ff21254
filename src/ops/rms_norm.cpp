// rms_norm as one op: the input is seen as [rows, cols] (cols = the normalised dims), one fused
// kernel writes the output with each row's rstd, and that is saved for the backward kernel, as
// PyTorch's fused rms_norm does, so backward needs no second pass for the statistics.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ops/op_helpers.h"
#include "tapegrad/ops/normalization.h"

namespace tapegrad {

using namespace ops;

namespace {

// "[*, 4, 5]" for normalized_shape [4, 5].
std::string expected_input(const Shape& normalized_shape) {
  std::string s = shape_str(normalized_shape);
  return "[*, " + s.substr(1);
}

// PyTorch's default eps: the epsilon of the type the rows are computed in (float32 for 16-bit).
double default_eps(DType dtype) {
  return dtype == kFloat64 ? std::numeric_limits<double>::epsilon()
                           : static_cast<double>(std::numeric_limits<float>::epsilon());
}

}  // namespace

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  check_defined("rms_norm", input);
  TG_CHECK(!normalized_shape.empty(), "rms_norm: normalized_shape must have at least one dim, got []");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TG_CHECK(input.dim() >= k && std::equal(normalized_shape.begin(), normalized_shape.end(), input.sizes().end() - k),
           "rms_norm: given normalized_shape=", shape_str(normalized_shape), ", expected input with shape ",
           expected_input(normalized_shape), ", got ", shape_str(input.sizes()));
  check_floating("rms_norm", input);
  if (weight.defined()) {
    TG_CHECK(weight.sizes() == normalized_shape, "rms_norm: weight of shape ", shape_str(weight.sizes()),
             " does not match normalized_shape ", shape_str(normalized_shape));
    TG_CHECK(weight.is_floating_point(), "rms_norm: weight must be floating-point, got ", weight.dtype());
    check_same_device("rms_norm", input, weight);
  }
  if (eps) TG_CHECK(*eps >= 0 && std::isfinite(*eps), "rms_norm: eps must be non-negative and finite, got ", *eps);
  const double e = eps ? *eps : default_eps(input.dtype());

  const DType dtype = input.dtype();
  // A weight of another dtype, as PyTorch's composite rms_norm: both in their promoted type (bf16
  // and f32: f32), the result converted back to the input's dtype. Recorded casts, so the
  // gradients reach each in its own dtype.
  if (weight.defined() && weight.dtype() != dtype) {
    const DType common = promote_types(dtype, weight.dtype());
    return rms_norm(cast(input, common), normalized_shape, cast(weight, common), e).to(dtype);
  }

  const Device device = input.device();
  // rstd is kept in the compute type (float32 for 16-bit inputs), like PyTorch's.
  const DType stat_dtype = dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype;
  const int64_t cols = shape_numel(normalized_shape);
  const int64_t rows = shape_numel(Shape(input.sizes().begin(), input.sizes().end() - k));
  Tensor x = input.detach().contiguous().reshape({rows, cols});
  Tensor w = weight.defined() ? weight.detach().contiguous().reshape({cols}) : Tensor();
  Tensor out = empty_tensor(input.sizes(), dtype, device);
  Tensor rstd = empty_tensor({rows}, stat_dtype, device);
  if (rows > 0 && cols > 0) TG_KERNEL(device, rms_norm)(x, w, e, out.reshape({rows, cols}), rstd);

  if (any_requires_grad({input, weight})) {
    const bool need_x = input.requires_grad();
    const bool need_w = weight.defined() && weight.requires_grad();
    SavedTensor saved_x = x, saved_rstd = rstd;
    SavedTensor saved_w = need_x && w.defined() ? SavedTensor(w) : SavedTensor();
    const Shape input_shape = input.sizes();
    record("rms_norm", {input, weight}, {out}, [=](const std::vector<Tensor>& g) {
      const Device dev = g[0].device();
      Tensor grad_x = need_x ? empty_tensor(input_shape, dtype, dev) : Tensor();
      Tensor grad_w = need_w ? empty_tensor(normalized_shape, dtype, dev) : Tensor();
      if (rows > 0 && cols > 0) {
        TG_KERNEL(dev, rms_norm_backward)
        (g[0].contiguous().reshape({rows, cols}), saved_x.get(), saved_rstd.get(),
         saved_w.defined() ? saved_w.get() : Tensor(), grad_x.defined() ? grad_x.reshape({rows, cols}) : Tensor(),
         grad_w.defined() ? grad_w.reshape({cols}) : Tensor());
      } else if (grad_w.defined() && grad_w.numel() > 0) {
        TG_KERNEL(dev, fill)(grad_w, 0.0);  // no rows: the weight gradient is an empty sum
      }
      return std::vector<Tensor>{grad_x, grad_w};
    });
  }
  return out;
}

}  // namespace tapegrad
