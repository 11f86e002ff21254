// The basic layers: Linear, ReLU, Dropout and Sequential (more activations in activation.h,
// Embedding in embedding.h, ModuleList and ModuleDict in container.h).
#pragma once

#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

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
// the identity in eval mode. Draws from `generator` (default_generator() when null), see
// tapegrad::dropout in tapegrad/ops/dropout.h.
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

// Applies its modules in order; children are named "0", "1", ... Built in one expression from
// module values and/or shared_ptrs, like LibTorch's torch::nn::Sequential:
//   nn::Sequential model(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
//   auto model = std::make_shared<nn::Sequential>(nn::Linear(4, 8), std::make_shared<nn::Tanh>());
// A value is moved into a new shared_ptr; a shared_ptr is shared. The braced list of shared_ptrs
// (Sequential{a, b}) works too. A single Sequential argument copies it (the copy shares the
// children); to nest one, pass it as a shared_ptr. Every element must be a UnaryModule.
class Sequential : public UnaryModule {
  template <class M>
  using EnableIfModule = std::enable_if_t<std::is_base_of<Module, std::decay_t<M>>::value>;
  template <class... Ms>
  static constexpr bool is_copy_argument() {
    if constexpr (sizeof...(Ms) == 1) return (std::is_same<std::decay_t<Ms>, Sequential>::value && ...);
    return false;
  }

 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) && !is_copy_argument<Ms...>()>>
  explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  void push_back(std::shared_ptr<UnaryModule> module);
  template <class M, class = EnableIfModule<M>>
  void push_back(M&& module) {
    static_assert(std::is_base_of<UnaryModule, std::decay_t<M>>::value,
                  "Sequential holds modules with Tensor forward(const Tensor&), i.e. nn::UnaryModule");
    push_back(std::shared_ptr<UnaryModule>(std::make_shared<std::decay_t<M>>(std::forward<M>(module))));
  }
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return named_children().size(); }
  // The i-th module; throws when out of range.
  std::shared_ptr<UnaryModule> operator[](size_t index) const;
};

}  // namespace tapegrad::nn
