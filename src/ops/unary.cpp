// The unary elementwise ops. Their forward and backward formulas are in src/math/unary.h; this
// file holds the dtype rules and records the backward (one fused kernel: grad * f'(x)).
#include "ops/op_helpers.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad {

using namespace ops;
using backend::UnaryOp;

namespace {

bool accepts_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Square;
}
bool backward_uses_input(UnaryOp op) {
  return op == UnaryOp::Abs || op == UnaryOp::Log || op == UnaryOp::Rsqrt || op == UnaryOp::Gelu ||
         op == UnaryOp::Square;
}
bool backward_uses_result(UnaryOp op) {
  return op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Tanh ||
         op == UnaryOp::Sigmoid || op == UnaryOp::Relu;
}
// relu'(x) tests x > 0, and relu(x) > 0 exactly when x > 0 (NaN and 0 fail both tests), so relu
// saves only its output, which the next layer keeps anyway, and its input can be freed.
bool input_read_from_result(UnaryOp op) { return op == UnaryOp::Relu; }

Tensor unary_op(UnaryOp op, const Tensor& x) {
  const char* name = backend::unary_op_name(op);
  check_defined(name, x);
  Tensor in = x;
  if (!x.is_floating_point() && !accepts_integers(op)) in = x.to(kFloat32);  // exp(int) is float, like PyTorch
  TG_CHECK(in.dtype() != kBool, name, ": not defined for bool tensors");
  check_computable(name, in);
  Tensor out = empty_tensor(in.sizes(), in.dtype(), in.device());
  if (out.numel() > 0) TG_KERNEL(in.device(), unary)(op, in, out);
  if (any_requires_grad({in})) {
    SavedTensor saved_x = backward_uses_input(op) ? SavedTensor(in) : SavedTensor();
    SavedTensor saved_y = backward_uses_result(op) ? SavedTensor(out) : SavedTensor();
    record(name, {in}, {out}, [op, saved_x, saved_y](const std::vector<Tensor>& g) {
      Tensor y_value = saved_y.defined() ? saved_y.get() : g[0];  // unused slots get any same-shaped tensor
      Tensor x_value = saved_x.defined() ? saved_x.get() : (input_read_from_result(op) ? y_value : g[0]);
      Tensor grad_x = empty_tensor(g[0].sizes(), g[0].dtype(), g[0].device());
      if (grad_x.numel() > 0) TG_KERNEL(g[0].device(), unary_backward)(op, g[0], x_value, y_value, grad_x);
      return std::vector<Tensor>{grad_x};
    });
  }
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) { return unary_op(UnaryOp::Neg, x); }
Tensor abs(const Tensor& x) { return unary_op(UnaryOp::Abs, x); }
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_op(UnaryOp::Rsqrt, x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, x); }
Tensor gelu(const Tensor& x) { return unary_op(UnaryOp::Gelu, x); }
Tensor square(const Tensor& x) { return unary_op(UnaryOp::Square, x); }

}  // namespace tapegrad
