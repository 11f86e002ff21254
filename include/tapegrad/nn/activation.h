// Activation modules beyond ReLU (in layers.h): Tanh, Sigmoid and GELU, each the module form of
// its elementwise op in tapegrad/ops/elementwise.h, so it can sit in a Sequential.
#pragma once

#include "tapegrad/nn/module.h"

namespace tapegrad::nn {

class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Tanh"; }
};

class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sigmoid"; }
};

// x * Phi(x) with the exact (erf) Phi, PyTorch's GELU(approximate='none'), its default and the only
// form offered here.
class GELU : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "GELU"; }

 protected:
  std::string extra_repr() const override { return "approximate='none'"; }
};

}  // namespace tapegrad::nn
