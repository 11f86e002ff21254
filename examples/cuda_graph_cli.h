// The examples' --cuda-graph flag (docs/cuda_graphs.md): a few eager warm-up steps, then one whole
// training step (forward, loss, backward, Adam with zero_grad) captured in a cuda::Graph and
// replayed for every later batch, each batch copied into the step's static input tensors first. A
// batch of another shape (the short last batch of an epoch) runs eagerly. The evaluation forward
// is captured the same way, under InferenceMode (GraphedForward, docs/inference.md). CUDA only; the
// options whose step cannot be captured are refused up front.
#pragma once

#include <cxxopts.hpp>
#include <functional>
#include <string>

#include "cli_values.h"
#include "tapegrad/tapegrad.h"

namespace examples {

inline void add_cuda_graph_options(cxxopts::Options& cli) {
  cli.add_options()("cuda-graph",
                    "capture one training step in a CUDA graph after 3 eager warm-up steps and replay it for every "
                    "batch of the same shape, and the evaluation forward likewise (CUDA only)");
}

class GraphedStep {
 public:
  static constexpr int kWarmupSteps = 3;
  // The step: reads the static input and target, returns the loss tensor (forward, loss,
  // zero_grad, backward and optimiser step inside).
  using Step = std::function<tapegrad::Tensor(const tapegrad::Tensor& input, const tapegrad::Tensor& target)>;

  // Throws UsageError for --cuda-graph without a CUDA device or with an option whose step cannot be
  // captured.
  GraphedStep(const cxxopts::ParseResult& args, tapegrad::Device device) : enabled_(args.count("cuda-graph") > 0) {
    if (!enabled_) return;
    if (!device.is_cuda()) throw UsageError("--cuda-graph needs a CUDA device, got " + device.str());
    if (args["amp"].as<std::string>() == "f16")
      throw UsageError(
          "--cuda-graph cannot capture --amp f16: its loss scaler checks the gradients for inf on the "
          "host every step (--amp bf16 works)");
    if (args.count("distributed") > 0)
      throw UsageError("--cuda-graph cannot capture --distributed: the gradient all-reduce runs on the host");
    if (!args["profile"].as<std::string>().empty())
      throw UsageError(
          "--cuda-graph cannot be used with --profile: a replay runs the whole step as one launch, "
          "which the profiler cannot split into ops");
  }

  bool enabled() const { return enabled_; }
  // For the banner: "" or ", cuda graph".
  std::string describe() const { return enabled_ ? ", cuda graph" : ""; }

  // One training step on (input, target): eager without --cuda-graph; with it, eager for the
  // warm-up steps and for batches whose shape differs from the first one, else a replay.
  tapegrad::Tensor run(const tapegrad::Tensor& input, const tapegrad::Tensor& target, const Step& step) {
    using namespace tapegrad;
    if (!enabled_) return step(input, target);
    if (!static_input_.defined()) {
      static_input_ = empty(input.sizes(), TensorOptions().dtype(input.dtype()).device(input.device()));
      static_target_ = empty(target.sizes(), TensorOptions().dtype(target.dtype()).device(target.device()));
    }
    if (input.sizes() != static_input_.sizes() || target.sizes() != static_target_.sizes()) return step(input, target);
    static_input_.copy_(input);
    static_target_.copy_(target);
    if (eager_steps_ < kWarmupSteps) {
      ++eager_steps_;
      return step(static_input_, static_target_);
    }
    if (!graph_.has_graph()) {
      cuda::GraphCapture capture(graph_);
      static_loss_ = step(static_input_, static_target_);
    }
    graph_.replay();
    return static_loss_;
  }

 private:
  bool enabled_;
  int eager_steps_ = 0;
  tapegrad::Tensor static_input_, static_target_, static_loss_;
  tapegrad::cuda::Graph graph_;
};

// The evaluation forward under --cuda-graph: run under InferenceMode, eager for its first call at a
// shape, then captured once at that shape and replayed for every later input of it (new inputs
// copied into the captured one; the parameters are read where they live, so the graph serves every
// epoch after optimiser steps). Other shapes (a short last chunk) run eagerly. Disabled, it is the
// plain forward. The returned tensor is the graph's output: read it before the next call.
class GraphedForward {
 public:
  using Forward = std::function<tapegrad::Tensor(const tapegrad::Tensor& input)>;
  explicit GraphedForward(bool enabled) : enabled_(enabled) {}

  tapegrad::Tensor run(const tapegrad::Tensor& input, const Forward& forward) {
    using namespace tapegrad;
    if (!enabled_) return forward(input);
    if (!static_input_.defined()) {
      static_input_ = empty(input.sizes(), TensorOptions().dtype(input.dtype()).device(input.device()));
      return forward(input);  // the warm-up: workspaces and handles exist before the capture
    }
    if (input.sizes() != static_input_.sizes() || input.dtype() != static_input_.dtype()) return forward(input);
    static_input_.copy_(input);
    if (!graph_.has_graph()) {
      cuda::GraphCapture capture(graph_);
      static_output_ = forward(static_input_);
    }
    graph_.replay();
    return static_output_;
  }
  bool captured() const { return graph_.has_graph(); }

 private:
  bool enabled_;
  tapegrad::Tensor static_input_, static_output_;
  tapegrad::cuda::Graph graph_;
};

}  // namespace examples
