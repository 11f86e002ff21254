// gradcheck: compares the analytic gradients of a function with central finite differences.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::autograd {

struct GradcheckOptions {
  double eps = 1e-6;  // finite-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
  int num_directions = 2;  // random output projections checked
  uint64_t seed = 0;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string report;  // what failed, where, and by how much
};

// `fn` maps the inputs to one output tensor (any shape). Inputs that require grad must be f64
// leaves. For a random projection v of the output it checks, for every element x_j of every such
// input, that the backward pass's d(v.fn)/dx_j matches (f(x+eps) - f(x-eps)) / 2eps.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace tapegrad::autograd
