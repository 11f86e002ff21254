// summary(): a model's layers, output shapes, parameter counts and memory, from one forward pass,
// printed like torchinfo's summary(). See docs/logging.md for an example table.
//
//   nn::Sequential model(nn::Linear(1000, 512), nn::ReLU(), nn::Linear(512, 10));
//   nn::SummaryOptions options;
//   options.optimizer_state_bytes_per_element = 8;  // Adam in float32: exp_avg and exp_avg_sq
//   std::cout << nn::summary(model, randn({64, 1000}), options).table;
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tapegrad/core/shape.h"
#include "tapegrad/nn/module.h"

namespace tapegrad::nn {

struct SummaryOptions {
  // Optimiser state per trainable parameter element, in bytes: 0 for plain SGD, 4 for SGD with
  // momentum and 8 for Adam/AdamW on float32 parameters (two moment buffers).
  double optimizer_state_bytes_per_element = 0;
};

// One row of the table: a module of the tree (named_modules() order, each module once).
struct LayerSummary {
  std::string name;                  // dotted path ("" for the model itself, "lstm", "0", "encoder.fc")
  std::string type;                  // Module::name()
  int depth = 0;                     // 0 for the model, 1 for its children, ...
  bool is_leaf = false;              // no child modules
  int64_t calls = 0;                 // forward calls seen during the pass
  std::vector<Shape> output_shapes;  // of the first call; empty when the module was not called
  int64_t num_params = 0;            // elements of the module's own parameters (not its children's)
  int64_t trainable_params = 0;      // of those, requiring grad
  int64_t output_bytes = 0;          // all output tensors of all calls
};

struct ModelSummary {
  std::vector<LayerSummary> layers;
  // Parameter elements, each tensor once however many modules share it.
  int64_t total_params = 0, trainable_params = 0, non_trainable_params = 0;
  // Bytes. gradient_bytes: one gradient per trainable parameter, in its dtype. activation_bytes:
  // the outputs of every leaf module's calls in the pass. torchinfo_pass_bytes: torchinfo's
  // "Forward/backward pass size" (outputs of leaves that have parameters, times two), for
  // comparison with its tables. input_bytes: the model's inputs (0 when it was not called
  // through operator()). total_bytes: input + parameters + gradients + optimiser state + activations.
  int64_t input_bytes = 0, param_bytes = 0, gradient_bytes = 0, optimizer_state_bytes = 0, activation_bytes = 0,
          torchinfo_pass_bytes = 0, total_bytes = 0;
  std::string table;  // the printed form
};

// Runs model(example_input) once without recording gradients (NoGradGuard; the train/eval mode
// is left as it is) and summarises it. Forward hooks are registered on every module for the pass
// and removed afterwards, also when the forward throws (the error propagates). Modules are seen
// when called through operator() (Sequential calls its children that way; a custom forward()
// should too, e.g. (*lstm_)(x) rather than lstm_->forward(x)).
ModelSummary summary(UnaryModule& model, const Tensor& example_input, const SummaryOptions& options = {});

// The same for a model without a one-tensor forward: `run_forward` calls the model once, e.g.
//   nn::summary(lstm, [&] { lstm(x); });
ModelSummary summary(Module& model, const std::function<void()>& run_forward, const SummaryOptions& options = {});

}  // namespace tapegrad::nn
