// The activation modules of activation.h: thin wrappers over their ops, which check the
// parameters again; the constructors check them first so a bad module fails where it is made.
#include "tapegrad/nn/activation.h"

#include <cmath>

#include "nn/format.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad::nn {

Tensor Tanh::forward(const Tensor& input) {
  return tanh(input);
}
Tensor Sigmoid::forward(const Tensor& input) {
  return sigmoid(input);
}
Tensor GELU::forward(const Tensor& input) {
  return gelu(input);
}
Tensor SiLU::forward(const Tensor& input) {
  return silu(input);
}

LeakyReLU::LeakyReLU(double negative_slope) : negative_slope_(negative_slope) {
  TG_CHECK(std::isfinite(negative_slope), "LeakyReLU: negative_slope must be finite, got ", negative_slope);
}
Tensor LeakyReLU::forward(const Tensor& input) {
  return leaky_relu(input, negative_slope_);
}
std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + format_double(negative_slope_);
}

Softplus::Softplus(double beta, double threshold) : beta_(beta), threshold_(threshold) {
  TG_CHECK(std::isfinite(beta) && beta != 0.0, "Softplus: beta must be finite and nonzero, got ", beta);
  TG_CHECK(!std::isnan(threshold), "Softplus: threshold must not be NaN");
}
Tensor Softplus::forward(const Tensor& input) {
  return softplus(input, beta_, threshold_);
}
std::string Softplus::extra_repr() const {
  return "beta=" + format_double(beta_) + ", threshold=" + format_double(threshold_);
}

ELU::ELU(double alpha) : alpha_(alpha) {
  TG_CHECK(std::isfinite(alpha), "ELU: alpha must be finite, got ", alpha);
}
Tensor ELU::forward(const Tensor& input) {
  return elu(input, alpha_);
}
std::string ELU::extra_repr() const {
  return "alpha=" + format_double(alpha_);
}

}  // namespace tapegrad::nn
