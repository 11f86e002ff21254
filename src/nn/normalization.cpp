// LayerNorm: parameter set-up and PyTorch's repr; the computation is tapegrad::layer_norm.
#include "tapegrad/nn/normalization.h"

#include <cmath>

#include "nn/format.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/normalization.h"

namespace tapegrad::nn {

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

// PyTorch prints normalized_shape as a Python tuple: (16,) or (4, 8).
std::string LayerNorm::extra_repr() const {
  std::string s = "(";
  for (size_t i = 0; i < normalized_shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(normalized_shape_[i]);
  if (normalized_shape_.size() == 1) s += ",";
  return s + "), eps=" + format_double(eps_) + ", elementwise_affine=" + (elementwise_affine_ ? "true" : "false");
}

}  // namespace tapegrad::nn
