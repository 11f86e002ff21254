// Tanh, Sigmoid and GELU modules: thin wrappers over their ops.
#include "tapegrad/nn/activation.h"

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

}  // namespace tapegrad::nn
