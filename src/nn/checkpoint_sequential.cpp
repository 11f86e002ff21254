// checkpoint_sequential: PyTorch's split of a module list into checkpointed runs (all but the last).
#include "tapegrad/nn/checkpoint_sequential.h"

#include <string>
#include <utility>

#include "tapegrad/autograd/anomaly_mode.h"
#include "tapegrad/autograd/checkpoint.h"

namespace tapegrad {

namespace {

struct NamedUnary {
  std::string scope;  // "index:Name", as Sequential::forward names it
  std::shared_ptr<nn::UnaryModule> module;
};

Tensor run(const std::vector<NamedUnary>& modules, size_t begin, size_t end, const Tensor& input) {
  Tensor x = input;
  for (size_t i = begin; i < end; ++i) {
    autograd::ModuleScope scope(modules[i].scope);
    x = (*modules[i].module)(x);
  }
  return x;
}

Tensor checkpoint_runs(std::vector<NamedUnary> modules, int64_t segments, const Tensor& input,
                       bool preserve_rng_state) {
  const int64_t count = static_cast<int64_t>(modules.size());
  TG_CHECK(segments >= 1, "checkpoint_sequential: segments must be at least 1, got ", segments);
  TG_CHECK(segments <= count, "checkpoint_sequential: segments (", segments, ") exceeds the number of modules (", count,
           ")");
  TG_CHECK(input.defined(), "checkpoint_sequential: input is undefined");
  auto shared = std::make_shared<const std::vector<NamedUnary>>(std::move(modules));
  const size_t segment_size = static_cast<size_t>(count / segments);
  Tensor x = input;
  size_t begin = 0;
  for (int64_t s = 0; s + 1 < segments; ++s, begin += segment_size) {
    const size_t end = begin + segment_size;
    CheckpointFunction fn = [shared, begin, end](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{run(*shared, begin, end, in[0])};
    };
    x = checkpoint(fn, {x}, preserve_rng_state)[0];
  }
  return run(*shared, begin, shared->size(), x);
}

}  // namespace

Tensor checkpoint_sequential(const nn::Sequential& sequential, int64_t segments, const Tensor& input,
                             bool preserve_rng_state) {
  std::vector<NamedUnary> modules;
  for (size_t i = 0; i < sequential.size(); ++i) {
    std::shared_ptr<nn::UnaryModule> m = sequential[i];  // throws for a child that is not a UnaryModule
    modules.push_back({sequential.named_children()[i].first + ":" + m->name(), std::move(m)});
  }
  return checkpoint_runs(std::move(modules), segments, input, preserve_rng_state);
}

Tensor checkpoint_sequential(const std::vector<std::shared_ptr<nn::UnaryModule>>& modules, int64_t segments,
                             const Tensor& input, bool preserve_rng_state) {
  std::vector<NamedUnary> named;
  for (size_t i = 0; i < modules.size(); ++i) {
    TG_CHECK(modules[i] != nullptr, "checkpoint_sequential: module ", i, " is null");
    named.push_back({std::to_string(i) + ":" + modules[i]->name(), modules[i]});
  }
  return checkpoint_runs(std::move(named), segments, input, preserve_rng_state);
}

}  // namespace tapegrad
