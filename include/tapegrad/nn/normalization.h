// Normalisation layers: LayerNorm and RMSNorm, PyTorch's nn.LayerNorm and nn.RMSNorm.
#pragma once

#include <initializer_list>
#include <optional>

#include "tapegrad/nn/module.h"

namespace tapegrad::nn {

// Normalises over the last dims of its input, which must equal normalized_shape (see
// tapegrad::layer_norm in tapegrad/ops/normalization.h):
//   y = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance over those dims)
// With elementwise_affine, `weight` (ones) and `bias` (zeros, absent with bias = false) have shape
// normalized_shape; without it there are no parameters. Prints as PyTorch:
//   LayerNorm((16,), eps=1e-05, elementwise_affine=true)
// Throws tapegrad::Error for an empty normalized_shape, a size below 1, and eps <= 0, NaN or
// infinite; forward throws when the input's trailing dims differ from normalized_shape.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  // LayerNorm(16) normalises over one dim of size 16, LayerNorm({4, 8}) over two.
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(std::initializer_list<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "LayerNorm"; }

  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }
  Tensor weight, bias;  // undefined where absent

 protected:
  std::string extra_repr() const override;

 private:
  Shape normalized_shape_;
  double eps_;
  bool elementwise_affine_;
};

// Root-mean-square normalisation over the last dims of its input, which must equal
// normalized_shape (see tapegrad::rms_norm in tapegrad/ops/normalization.h):
//   y = x / sqrt(mean(x^2) + eps) * weight
// eps unset (PyTorch's None) is the machine epsilon of the compute type. With elementwise_affine,
// `weight` (ones) has shape normalized_shape; without it there are no parameters. Prints as PyTorch:
//   RMSNorm((16,), eps=None, elementwise_affine=true)
// Throws tapegrad::Error for an empty normalized_shape, a size below 1, and eps < 0, NaN or
// infinite; forward throws when the input's trailing dims differ from normalized_shape.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  // RMSNorm(16) normalises over one dim of size 16, RMSNorm({4, 8}) over two.
  explicit RMSNorm(int64_t normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  explicit RMSNorm(std::initializer_list<int64_t> normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "RMSNorm"; }

  const Shape& normalized_shape() const { return normalized_shape_; }
  std::optional<double> eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }
  Tensor weight;  // undefined without elementwise_affine

 protected:
  std::string extra_repr() const override;

 private:
  Shape normalized_shape_;
  std::optional<double> eps_;
  bool elementwise_affine_;
};

}  // namespace tapegrad::nn
