// Linear, ReLU, Dropout and Sequential.
#include "tapegrad/nn/layers.h"

#include <cmath>
#include <typeinfo>

#include "nn/format.h"
#include "tapegrad/autograd/anomaly_mode.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/dropout.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/linalg.h"

namespace tapegrad::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator* generator)
    : in_features_(in_features), out_features_(out_features) {
  TG_CHECK(in_features > 0 && out_features > 0, "Linear: feature counts must be positive, got ", in_features, " and ",
           out_features);
  // kaiming_uniform_(a=sqrt(5)) on [out, in] reduces to U(-1/sqrt(in), 1/sqrt(in)); so does the bias.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  Tensor w = empty({out_features, in_features});
  uniform_(w, -bound, bound, generator);
  weight = register_parameter("weight", w);
  if (with_bias) {
    Tensor b = empty({out_features});
    uniform_(b, -bound, bound, generator);
    bias = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& input) {
  return linear(input, weight, bias);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

Tensor ReLU::forward(const Tensor& input) {
  return relu(input);
}

Dropout::Dropout(double p, Generator* generator) : p_(p), generator_(generator) {
  TG_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& input) {
  return dropout(input, p_, is_training(), generator_);
}

std::string Dropout::extra_repr() const {
  return "p=" + format_double(p_);
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<UnaryModule> module) {
  register_module(std::to_string(size()), std::move(module));
}

namespace {
// The children are the list (so replace_module() on a Sequential takes effect); only
// replace_module can put a module there that is not a UnaryModule.
UnaryModule& unary_child(const Sequential& seq, size_t index) {
  const auto& [child_name, child] = seq.named_children()[index];
  auto* unary = dynamic_cast<UnaryModule*>(child.get());
  TG_CHECK(unary != nullptr, "Sequential: module '", child_name, "' (", child->name(),
           ") does not map a tensor to a tensor (not a UnaryModule)");
  return *unary;
}
}  // namespace

namespace {
// A Linear followed by a ReLU, both exactly those types (a subclass may change forward) and
// neither with forward hooks (they would miss the tensor between the two): linear_relu computes
// the pair as one op. Only when nothing is recorded, so training keeps the two ops' tape nodes
// and profiler scopes; the fused op runs in the Linear's scope.
const Linear* fusable_linear_relu(const UnaryModule& module, const UnaryModule& next) {
  if (autograd::grad_enabled() || typeid(module) != typeid(Linear) || typeid(next) != typeid(ReLU)) return nullptr;
  if (module.has_forward_hooks() || next.has_forward_hooks()) return nullptr;
  return static_cast<const Linear*>(&module);
}
}  // namespace

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < size(); ++i) {
    UnaryModule& module = unary_child(*this, i);
    autograd::ModuleScope scope(named_children()[i].first + ":" + module.name());
    if (i + 1 < size()) {
      if (const Linear* linear = fusable_linear_relu(module, unary_child(*this, i + 1))) {
        x = linear_relu(x, linear->weight, linear->bias);
        ++i;
        continue;
      }
    }
    x = module(x);  // through operator(), so the child's forward hooks run
  }
  return x;
}

std::shared_ptr<UnaryModule> Sequential::operator[](size_t index) const {
  TG_CHECK(index < size(), "Sequential: index ", index, " is out of range for ", size(), " modules");
  unary_child(*this, index);
  return std::static_pointer_cast<UnaryModule>(named_children()[index].second);
}

}  // namespace tapegrad::nn
