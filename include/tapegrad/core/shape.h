// Shapes and strides: plain vectors of int64, with the helpers every layer needs.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tapegrad {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& sizes);
Shape contiguous_strides(const Shape& sizes);
std::string shape_str(const Shape& sizes);  // "[2, 3]"
// Maps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

}  // namespace tapegrad
