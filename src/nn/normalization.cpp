// LayerNorm and RMSNorm: parameter set-up and PyTorch's repr; the computations are
// tapegrad::layer_norm and tapegrad::rms_norm.
#include "tapegrad/nn/normalization.h"

#include <cmath>

#include "nn/format.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/normalization.h"

namespace tapegrad::nn {

namespace {

// PyTorch prints normalized_shape as a Python tuple: (16,) or (4, 8).
std::string shape_tuple(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

}  // namespace

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps), elementwise_affine_(elementwise_affine) {
  TG_CHECK(!normalized_shape_.empty(), "LayerNorm: normalized_shape must have at least one dim, got []");
  for (int64_t size : normalized_shape_)
    TG_CHECK(size > 0, "LayerNorm: normalized_shape sizes must be positive, got ", shape_str(normalized_shape_));
  TG_CHECK(eps > 0 && std::isfinite(eps), "LayerNorm: eps must be positive and finite, got ", eps);
  // PyTorch's reset_parameters: weight ones, bias zeros.
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape_));
    if (with_bias) bias = register_parameter("bias", zeros(normalized_shape_));
  }
}

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : LayerNorm(Shape{normalized_shape}, eps, elementwise_affine, with_bias) {}

LayerNorm::LayerNorm(std::initializer_list<int64_t> normalized_shape, double eps, bool elementwise_affine,
                     bool with_bias)
    : LayerNorm(Shape(normalized_shape), eps, elementwise_affine, with_bias) {}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return shape_tuple(normalized_shape_) + ", eps=" + format_double(eps_) +
         ", elementwise_affine=" + (elementwise_affine_ ? "true" : "false");
}

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps), elementwise_affine_(elementwise_affine) {
  TG_CHECK(!normalized_shape_.empty(), "RMSNorm: normalized_shape must have at least one dim, got []");
  for (int64_t size : normalized_shape_)
    TG_CHECK(size > 0, "RMSNorm: normalized_shape sizes must be positive, got ", shape_str(normalized_shape_));
  if (eps) TG_CHECK(*eps >= 0 && std::isfinite(*eps), "RMSNorm: eps must be non-negative and finite, got ", *eps);
  // PyTorch's reset_parameters: weight ones.
  if (elementwise_affine) weight = register_parameter("weight", ones(normalized_shape_));
}

RMSNorm::RMSNorm(int64_t normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : RMSNorm(Shape{normalized_shape}, eps, elementwise_affine) {}

RMSNorm::RMSNorm(std::initializer_list<int64_t> normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : RMSNorm(Shape(normalized_shape), eps, elementwise_affine) {}

Tensor RMSNorm::forward(const Tensor& input) {
  return rms_norm(input, normalized_shape_, weight, eps_);
}

std::string RMSNorm::extra_repr() const {
  return shape_tuple(normalized_shape_) + ", eps=" + (eps_ ? format_double(*eps_) : std::string("None")) +
         ", elementwise_affine=" + (elementwise_affine_ ? "true" : "false");
}

}  // namespace tapegrad::nn
