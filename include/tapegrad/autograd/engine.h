// The engine: replays the tape backwards from one or more roots and accumulates into .grad().
#pragma once

#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::autograd {

// Backpropagates from `roots`. `grad_roots[i]` is d(loss)/d(roots[i]); it may be undefined for a
// one-element root (then 1 is used). Without retain_graph each node frees its saved tensors after
// running, and a second backward through it throws tapegrad::Error.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

}  // namespace tapegrad::autograd
