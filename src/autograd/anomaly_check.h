// Internal helpers of anomaly mode shared by record() and the backward engine.
#pragma once

#include <string>
#include <vector>

#include "tapegrad/autograd/node.h"

namespace tapegrad::autograd {

// True when every element of a floating-point tensor is finite (always true for other dtypes).
bool all_finite(const Tensor& t);
// "([2, 3], [3])"
std::string shapes_str(const std::vector<OutputMeta>& metas);

}  // namespace tapegrad::autograd
