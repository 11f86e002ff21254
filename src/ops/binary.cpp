// Binary arithmetic with broadcasting and type promotion, and the backward of each op.
#include <cmath>

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad {

using namespace ops;
using backend::BinaryOp;

namespace {

DType result_dtype(BinaryOp op, DType a, DType b) {
  DType dt = promote_types(a, b);
  if (dt == kBool) dt = kInt64;
  if (op == BinaryOp::Div && is_integral(dt)) dt = kFloat32;  // true division
  return dt;
}

// Gradients of a (op) b with respect to a and b, before reducing broadcast dims.
std::vector<Tensor> binary_backward(BinaryOp op, const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& out,
                                    bool need_a, bool need_b) {
  Tensor ga, gb;
  switch (op) {
    case BinaryOp::Add:
      ga = g;
      gb = g;
      break;
    case BinaryOp::Sub:
      ga = g;
      if (need_b) gb = neg(g);
      break;
    case BinaryOp::Mul:
      if (need_a) ga = mul(g, b);
      if (need_b) gb = mul(g, a);
      break;
    case BinaryOp::Div:
      if (need_a) ga = div(g, b);
      if (need_b) gb = neg(div(mul(g, out), b));
      break;
    case BinaryOp::Pow:
      // d/da a^b = b a^(b-1); d/db a^b = a^b log(a), taken as 0 where a == 0 (PyTorch's convention).
      if (need_a) ga = mul(g, mul(b, pow(a, sub(b, 1.0))));
      if (need_b) gb = where(eq(a, 0.0), zeros_like(g), mul(g, mul(out, log(a))));
      break;
    case BinaryOp::Maximum:
    case BinaryOp::Minimum: {
      // The larger (smaller) input gets the gradient; a tie splits it evenly.
      Tensor a_wins = op == BinaryOp::Maximum ? gt(a, b) : lt(a, b);
      Tensor tie = eq(a, b);
      Tensor half = mul(g, 0.5);
      if (need_a) ga = where(a_wins, g, where(tie, half, 0.0));
      if (need_b) gb = where(a_wins, zeros_like(g), where(tie, half, g));
      break;
    }
  }
  return {need_a ? ga : Tensor(), need_b ? gb : Tensor()};
}

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = backend::binary_op_name(op);
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_same_device(name, a, b);
  DType dt = result_dtype(op, a.dtype(), b.dtype());
  Tensor ca = cast(a, dt), cb = cast(b, dt);
  Shape shape = broadcast_shapes(name, ca.sizes(), cb.sizes());
  Tensor out = empty_tensor(shape, dt, a.device());
  if (out.numel() > 0) TG_KERNEL(a.device(), binary)(op, expand_raw(ca, shape), expand_raw(cb, shape), out);
  if (any_requires_grad({ca, cb})) {
    bool need_a = ca.requires_grad(), need_b = cb.requires_grad();
    // Save only what the backward reads, so later in-place writes to the others stay legal.
    bool save_a = false, save_b = false, save_out = false;
    switch (op) {
      case BinaryOp::Add:
      case BinaryOp::Sub:
        break;
      case BinaryOp::Mul:
        save_a = need_b;
        save_b = need_a;
        break;
      case BinaryOp::Div:
        save_b = true;
        save_out = need_b;
        break;
      case BinaryOp::Pow:
        save_a = true;
        save_b = need_a;
        save_out = need_b;
        break;
      case BinaryOp::Maximum:
      case BinaryOp::Minimum:
        save_a = save_b = true;
        break;
    }
    SavedTensor sa = save_a ? SavedTensor(ca) : SavedTensor();
    SavedTensor sb = save_b ? SavedTensor(cb) : SavedTensor();
    SavedTensor so = save_out ? SavedTensor(out) : SavedTensor();
    Shape a_shape = ca.sizes(), b_shape = cb.sizes();
    record(name, {ca, cb}, {out}, [=](const std::vector<Tensor>& g) {
      std::vector<Tensor> grads = binary_backward(op, g[0], sa.get(), sb.get(), so.get(), need_a, need_b);
      if (grads[0].defined()) grads[0] = sum_to(grads[0], a_shape);
      if (grads[1].defined()) grads[1] = sum_to(grads[1], b_shape);
      return grads;
    });
  }
  return out;
}

// A Python-like scalar operand: it keeps a tensor's dtype unless the tensor is integral and the
// scalar is not an integer (then the result is float32).
Tensor scalar_like(const Tensor& t, double value, const char* op = "scalar op") {
  check_defined(op, t);
  DType dt = t.dtype();
  if (is_integral(dt) && !(std::isfinite(value) && std::floor(value) == value)) dt = kFloat32;
  if (dt == kBool) dt = kInt64;
  return full({}, value, TensorOptions(dt).device(t.device()));
}

// a (op) b with the number b passed to the kernel as an argument, where the backend can (no 0-d
// tensor to allocate and fill on the device, one launch instead of two); a (op) scalar_like(a, b)
// otherwise. Taken for a floating a with +, -, *, /, whose gradients need no saved scalar tensor.
Tensor binary_with_number(BinaryOp op, const Tensor& a, double b) {
  const char* name = backend::binary_op_name(op);
  check_defined(name, a, "first operand");
  const auto kernel = backend::kernels(a.device()).binary_scalar;
  const bool simple = op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul || op == BinaryOp::Div;
  if (kernel == nullptr || !simple || !a.is_floating_point()) return binary_op(op, a, scalar_like(a, b, name));
  Tensor out = empty_tensor(a.sizes(), a.dtype(), a.device());
  if (out.numel() > 0) kernel(op, a.detach(), b, out);
  if (any_requires_grad({a})) {
    record(name, {a}, {out}, [op, b](const std::vector<Tensor>& g) {
      Tensor grad = g[0];
      if (op == BinaryOp::Mul) grad = mul(grad, b);
      if (op == BinaryOp::Div) grad = div(grad, b);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  return binary_op(BinaryOp::Add, a, alpha == 1.0 ? b : mul(b, alpha));
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  return binary_op(BinaryOp::Sub, a, alpha == 1.0 ? b : mul(b, alpha));
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Div, a, b);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Pow, a, b);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Maximum, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary_op(BinaryOp::Minimum, a, b);
}

Tensor add(const Tensor& a, double b) {
  return binary_with_number(BinaryOp::Add, a, b);
}
Tensor sub(const Tensor& a, double b) {
  return binary_with_number(BinaryOp::Sub, a, b);
}
Tensor mul(const Tensor& a, double b) {
  return binary_with_number(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, double b) {
  return binary_with_number(BinaryOp::Div, a, b);
}
Tensor pow(const Tensor& a, double exponent) {
  check_defined("pow", a);
  if (exponent == 2.0) return square(a);
  return binary_op(BinaryOp::Pow, a, scalar_like(a, exponent, "pow"));
}
Tensor pow(double base, const Tensor& exponent) {
  return binary_op(BinaryOp::Pow, scalar_like(exponent, base, "pow"), exponent);
}
Tensor maximum(const Tensor& a, double b) {
  return binary_op(BinaryOp::Maximum, a, scalar_like(a, b, "maximum"));
}
Tensor minimum(const Tensor& a, double b) {
  return binary_op(BinaryOp::Minimum, a, scalar_like(a, b, "minimum"));
}

Tensor operator-(const Tensor& a) {
  return neg(a);
}
Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
Tensor operator+(double a, const Tensor& b) {
  return add(b, a);
}
Tensor operator-(double a, const Tensor& b) {
  return add(neg(b), a);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator/(double a, const Tensor& b) {
  return binary_op(BinaryOp::Div, scalar_like(b, a, "div"), b);
}

// In-place forms: out-of-place when autograd must record (so the backward sees the old value),
// else the kernel writes straight into self.
namespace {
Tensor& inplace_binary(const char* name, BinaryOp op, Tensor& self, const Tensor& other) {
  check_defined(name, self);
  check_defined(name, other, "second operand");
  check_same_device(name, self, other);
  DType dt = result_dtype(op, self.dtype(), other.dtype());
  TG_CHECK(dt == self.dtype() || (self.is_floating_point() && is_floating_point(dt)), name, ": result type ", dt,
           " cannot be stored in the ", self.dtype(), " tensor being modified");
  Shape shape = broadcast_shapes(name, self.sizes(), other.sizes());
  TG_CHECK(shape == self.sizes(), name, ": the result's shape ", shape_str(shape), " does not match the shape ",
           shape_str(self.sizes()), " of the tensor being modified");
  check_inplace(name, self, other);
  if (any_requires_grad({self, other})) {
    adopt_result(self, binary_op(op, self.clone(), other));
    return self;
  }
  Tensor source = other.storage() == self.storage() ? other.clone() : other;
  source = cast(source, self.dtype());
  if (self.numel() > 0) TG_KERNEL(self.device(), binary)(op, self, expand_raw(source, shape), self);
  self.storage()->bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return inplace_binary("add_", BinaryOp::Add, *this, alpha == 1.0 ? other : mul(other, alpha));
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  return inplace_binary("sub_", BinaryOp::Sub, *this, alpha == 1.0 ? other : mul(other, alpha));
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace_binary("mul_", BinaryOp::Mul, *this, other);
}
Tensor& Tensor::div_(const Tensor& other) {
  return inplace_binary("div_", BinaryOp::Div, *this, other);
}
Tensor& Tensor::add_(double other) {
  return inplace_binary("add_", BinaryOp::Add, *this, scalar_like(*this, other));
}
Tensor& Tensor::sub_(double other) {
  return inplace_binary("sub_", BinaryOp::Sub, *this, scalar_like(*this, other));
}
Tensor& Tensor::mul_(double other) {
  return inplace_binary("mul_", BinaryOp::Mul, *this, scalar_like(*this, other));
}
Tensor& Tensor::div_(double other) {
  return inplace_binary("div_", BinaryOp::Div, *this, scalar_like(*this, other));
}

Tensor& operator+=(Tensor& a, const Tensor& b) {
  return a.add_(b);
}
Tensor& operator-=(Tensor& a, const Tensor& b) {
  return a.sub_(b);
}
Tensor& operator*=(Tensor& a, const Tensor& b) {
  return a.mul_(b);
}
Tensor& operator/=(Tensor& a, const Tensor& b) {
  return a.div_(b);
}

}  // namespace tapegrad
