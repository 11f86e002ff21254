// Helpers shared by the op implementations: output allocation, broadcasting, the reduction of a
// broadcast gradient back to its input's shape, device checks, and in-place bookkeeping.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/node.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::ops {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;

// A new contiguous, uninitialised tensor.
Tensor empty_tensor(const Shape& sizes, DType dtype, Device device, const char* op = "empty");
// Throws naming `op` when `value` cannot be stored in `dtype` (NaN or out of range for an integer
// dtype): the conversion would be undefined behaviour, not a wrapped value.
void check_value_fits(const char* op, double value, DType dtype);
// A view of `base`'s storage with the given geometry; autograd is the caller's business.
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset);

void check_defined(const char* op, const Tensor& t, const char* what = "input");
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// Floating point only (the op is differentiable or a transcendental).
void check_floating(const char* op, const Tensor& t);

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Sums `grad` over the dims that broadcasting added or stretched, giving `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);
// The sum over the rows of a 2-D tensor [n, m] -> [m] (a bias gradient), as one matrix-vector
// product ones[n] @ t through the backend's GEMM, in `dtype` (t's own by default: a 16-bit t summed
// into a float32 bias gradient keeps the float32 sums); no autograd.
Tensor column_sum(const Tensor& t, std::optional<DType> dtype = std::nullopt);
// A view of t expanded to `shape` without autograd (for handing to kernels).
Tensor expand_raw(const Tensor& t, const Shape& shape);
// t converted to dtype (t itself when it already has it); recorded by autograd.
Tensor cast(const Tensor& t, DType dtype);

// out = alpha * a @ b + beta * out with the products in `products` (amp::autocast_inputs, decided
// when the forward ran, so that backward's products match): the backend's gemm when a, b and out
// all have that dtype, else its gemm_mixed (operands of float32 or `products`, rounded to
// `products`, float32 sums, out float32 or `products`) under autocast.
void gemm_as(const char* op, DType products, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
             double beta);

// Checks that writing into `self` in place is allowed under autograd (and inference mode).
void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor());
// An inference tensor is written in place only inside InferenceMode: it counts no versions.
void check_inference_inplace(const char* op, const Tensor& self);
// After an out-of-place computation `result` of an in-place op on `self`: copies it into self
// and moves result's autograd history onto self.
void adopt_result(Tensor& self, const Tensor& result);

std::string describe(const Tensor& t);  // "float32 [2, 3] on cpu"

}  // namespace tapegrad::ops
