// Activation modules beyond ReLU (in layers.h): Tanh, Sigmoid, GELU, SiLU, LeakyReLU, Softplus and ELU,
// each the module form of its elementwise op in tapegrad/ops/elementwise.h, so it can sit in a
// Sequential. Parameters, defaults and printed form are PyTorch's; a bad parameter throws
// tapegrad::Error from the constructor.
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

// x * sigmoid(x), PyTorch's SiLU.
class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "SiLU"; }
};

// x > 0 ? x : negative_slope * x. negative_slope must be finite.
class LeakyReLU : public UnaryModule {
 public:
  explicit LeakyReLU(double negative_slope = 0.01);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "LeakyReLU"; }
  double negative_slope() const { return negative_slope_; }

 protected:
  std::string extra_repr() const override;

 private:
  double negative_slope_;
};

// log(1 + exp(beta * x)) / beta, or x where beta * x > threshold. beta must be finite and nonzero,
// threshold not NaN.
class Softplus : public UnaryModule {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Softplus"; }
  double beta() const { return beta_; }
  double threshold() const { return threshold_; }

 protected:
  std::string extra_repr() const override;

 private:
  double beta_, threshold_;
};

// x > 0 ? x : alpha * (exp(x) - 1). alpha must be finite.
class ELU : public UnaryModule {
 public:
  explicit ELU(double alpha = 1.0);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "ELU"; }
  double alpha() const { return alpha_; }

 protected:
  std::string extra_repr() const override;

 private:
  double alpha_;
};

}  // namespace tapegrad::nn
