// Shapes and strides: plain vectors of int64, with the helpers every layer needs.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tapegrad {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& sizes);
// The element count of a tensor of `sizes`, for `op`: throws tapegrad::Error naming the op when a
// size is negative or the count overflows int64.
int64_t checked_numel(const char* op, const Shape& sizes);
// The bytes a contiguous tensor of `sizes` with `itemsize`-byte elements needs, for `op`: throws
// tapegrad::Error naming the op when a size is negative or the count or the bytes overflow int64
// (every byte offset in the library is an int64).
size_t checked_nbytes(const char* op, const Shape& sizes, size_t itemsize);
Shape contiguous_strides(const Shape& sizes);
std::string shape_str(const Shape& sizes);  // "[2, 3]"
// Maps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

}  // namespace tapegrad
