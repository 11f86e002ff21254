// The basic layers: Linear, ReLU, Dropout and Sequential.
#pragma once

#include <initializer_list>
#include <memory>

#include "tapegrad/core/generator.h"
#include "tapegrad/nn/module.h"

namespace tapegrad::nn {

// y = x W^T + b for x [..., in_features]; W [out, in] and b [out] start U(-1/sqrt(in), 1/sqrt(in)),
// PyTorch's default initialisation.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Linear"; }
  Tensor weight, bias;  // bias is undefined without one

 protected:
  std::string extra_repr() const override;

 private:
  int64_t in_features_, out_features_;
};

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "ReLU"; }
};

// Zeroes each element with probability p while training and scales the rest by 1/(1-p);
// the identity in eval mode.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Dropout"; }

 protected:
  std::string extra_repr() const override;

 private:
  double p_;
  Generator* generator_;
};

// Applies its modules in order; children are named "0", "1", ...
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);
  void push_back(std::shared_ptr<UnaryModule> module);
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  // The i-th module; throws when out of range.
  std::shared_ptr<UnaryModule> operator[](size_t index) const;

 private:
  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

}  // namespace tapegrad::nn
