// The unary elementwise ops. Their formulas and facts (integers or not, what the backward reads)
// are in src/math/unary.h, the list of ops in src/math/op_list.h; this file holds the dtype rule,
// the checks of the scalar parameters, and records the backward (one fused kernel: grad * f'(x)).
#include <cmath>

#include "math/op_switch.h"
#include "ops/op_helpers.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad {

using namespace ops;
using backend::UnaryOp;
using math::BackwardReads;
using math::Scalars;

namespace {

Tensor unary_op(UnaryOp op, const Tensor& x, Scalars<double> scalars = {}) {
  const math::UnaryOpInfo& info = math::unary_op_info(op);
  const char* name = info.name;
  check_defined(name, x);
  Tensor in = x;
  if (!x.is_floating_point() && !info.integers) in = x.to(kFloat32);  // exp(int) is float, like PyTorch
  TG_CHECK(in.dtype() != kBool, name, ": not defined for bool tensors");
  Tensor out = empty_tensor(in.sizes(), in.dtype(), in.device());
  if (out.numel() > 0) TG_KERNEL(in.device(), unary)(op, scalars, in, out);
  if (any_requires_grad({in})) {
    const BackwardReads reads = info.reads;
    const bool input = reads == BackwardReads::Input || reads == BackwardReads::InputAndResult;
    const bool result = reads == BackwardReads::Result || reads == BackwardReads::InputAndResult ||
                        reads == BackwardReads::ResultAsInput;
    SavedTensor saved_x = input ? SavedTensor(in) : SavedTensor();
    SavedTensor saved_y = result ? SavedTensor(out) : SavedTensor();
    record(name, {in}, {out}, [op, scalars, reads, saved_x, saved_y](const std::vector<Tensor>& g) {
      Tensor y_value = saved_y.defined() ? saved_y.get() : g[0];  // unused slots get any same-shaped tensor
      Tensor x_value = saved_x.defined() ? saved_x.get() : (reads == BackwardReads::ResultAsInput ? y_value : g[0]);
      Tensor grad_x = empty_tensor(g[0].sizes(), g[0].dtype(), g[0].device());
      if (grad_x.numel() > 0) TG_KERNEL(g[0].device(), unary_backward)(op, scalars, g[0], x_value, y_value, grad_x);
      return std::vector<Tensor>{grad_x};
    });
  }
  return out;
}

void check_finite(const char* op, const char* parameter, double value) {
  TG_CHECK(std::isfinite(value), op, ": ", parameter, " must be finite, got ", value);
}

}  // namespace

Tensor neg(const Tensor& x) {
  return unary_op(UnaryOp::Neg, x);
}
Tensor abs(const Tensor& x) {
  return unary_op(UnaryOp::Abs, x);
}
Tensor exp(const Tensor& x) {
  return unary_op(UnaryOp::Exp, x);
}
Tensor log(const Tensor& x) {
  return unary_op(UnaryOp::Log, x);
}
Tensor sqrt(const Tensor& x) {
  return unary_op(UnaryOp::Sqrt, x);
}
Tensor rsqrt(const Tensor& x) {
  return unary_op(UnaryOp::Rsqrt, x);
}
Tensor tanh(const Tensor& x) {
  return unary_op(UnaryOp::Tanh, x);
}
Tensor sigmoid(const Tensor& x) {
  return unary_op(UnaryOp::Sigmoid, x);
}
Tensor relu(const Tensor& x) {
  return unary_op(UnaryOp::Relu, x);
}
Tensor gelu(const Tensor& x) {
  return unary_op(UnaryOp::Gelu, x);
}
Tensor silu(const Tensor& x) {
  return unary_op(UnaryOp::Silu, x);
}
Tensor square(const Tensor& x) {
  return unary_op(UnaryOp::Square, x);
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_finite("leaky_relu", "negative_slope", negative_slope);
  return unary_op(UnaryOp::LeakyRelu, x, {negative_slope});
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  check_finite("softplus", "beta", beta);
  TG_CHECK(beta != 0.0, "softplus: beta must be nonzero (it divides the result), got 0");
  TG_CHECK(!std::isnan(threshold), "softplus: threshold must not be NaN");
  return unary_op(UnaryOp::Softplus, x, {beta, threshold});
}

Tensor elu(const Tensor& x, double alpha) {
  check_finite("elu", "alpha", alpha);
  return unary_op(UnaryOp::Elu, x, {alpha});
}

}  // namespace tapegrad
