// Shape helpers.
#include "tapegrad/core/shape.h"

#include <sstream>

#include "tapegrad/core/error.h"

namespace tapegrad {

int64_t shape_numel(const Shape& sizes) {
  for (int64_t s : sizes)
    if (s == 0) return 0;  // before multiplying: [0, 2^40, 2^40] is empty, not an overflow
  int64_t n = 1;
  for (int64_t s : sizes)
    TG_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape_str(sizes), " has more elements than int64 can count");
  return n;
}

int64_t checked_numel(const char* op, const Shape& sizes) {
  for (int64_t s : sizes) TG_CHECK(s >= 0, op, ": negative size in shape ", shape_str(sizes));
  for (int64_t s : sizes)
    if (s == 0) return 0;
  int64_t n = 1;
  for (int64_t s : sizes)
    TG_CHECK(!__builtin_mul_overflow(n, s, &n), op, ": shape ", shape_str(sizes),
             " has more elements than int64 can count");
  return n;
}

size_t checked_nbytes(const char* op, const Shape& sizes, size_t itemsize) {
  const int64_t numel = checked_numel(op, sizes);
  int64_t nbytes = 0;
  TG_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(itemsize), &nbytes), op, ": shape ", shape_str(sizes),
           " of ", itemsize, "-byte elements needs more than 2^63 bytes");
  return static_cast<size_t>(nbytes);
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    // Checked even for empty tensors: every stride must be a valid int64 offset factor.
    TG_CHECK(!__builtin_mul_overflow(stride, sizes[i] > 1 ? sizes[i] : 1, &stride), "shape ", shape_str(sizes),
             " is too large: its strides overflow int64");
  }
  return strides;
}

std::string shape_str(const Shape& sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << "]";
  return out.str();
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t extent = ndim > 0 ? ndim : 1;  // a 0-dim tensor accepts dim 0 and -1, like PyTorch
  TG_CHECK(dim >= -extent && dim < extent, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
           " dims (expected in [", -extent, ", ", extent - 1, "])");
  return dim < 0 ? dim + extent : dim;
}

}  // namespace tapegrad
