// Comparisons (bool results, no gradient), where, and clamp.
#include <cmath>

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad {

using namespace ops;
using backend::CompareOp;

namespace {

const char* compare_name(CompareOp op) {
  switch (op) {
    case CompareOp::Eq:
      return "eq";
    case CompareOp::Ne:
      return "ne";
    case CompareOp::Lt:
      return "lt";
    case CompareOp::Le:
      return "le";
    case CompareOp::Gt:
      return "gt";
    case CompareOp::Ge:
      return "ge";
  }
  return "compare";
}

Tensor compare_op(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = compare_name(op);
  check_defined(name, a);
  check_defined(name, b);
  check_same_device(name, a, b);
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor ca = cast(a.detach(), dt), cb = cast(b.detach(), dt);
  Shape shape = broadcast_shapes(name, ca.sizes(), cb.sizes());
  Tensor out = empty_tensor(shape, kBool, a.device());
  if (out.numel() > 0) TG_KERNEL(a.device(), compare)(op, expand_raw(ca, shape), expand_raw(cb, shape), out);
  return out;
}

Tensor scalar_for(const char* op, const Tensor& t, double value) {
  check_defined(op, t);
  DType dt = t.dtype();
  if (is_integral(dt) && !(std::isfinite(value) && std::floor(value) == value)) dt = kFloat64;
  return full({}, value, TensorOptions(dt).device(t.device()));
}

// a (op) value. Where the backend takes the number as a kernel argument and it converts to a's
// dtype exactly as scalar_for would (no promotion), no 0-d tensor is made.
Tensor compare_with_number(CompareOp op, const Tensor& a, double value) {
  const char* name = compare_name(op);
  check_defined(name, a);
  const bool same_dtype = !is_integral(a.dtype()) || (std::isfinite(value) && std::floor(value) == value);
  const auto kernel = backend::kernels(a.device()).compare_scalar;
  if (!same_dtype || kernel == nullptr) return compare_op(op, a, scalar_for(name, a, value));
  Tensor out = empty_tensor(a.sizes(), kBool, a.device());
  if (out.numel() > 0) kernel(op, a.detach(), value, out);
  return out;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::Eq, a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::Ne, a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::Lt, a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::Le, a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::Gt, a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare_op(CompareOp::Ge, a, b);
}
Tensor eq(const Tensor& a, double b) {
  return compare_with_number(CompareOp::Eq, a, b);
}
Tensor ne(const Tensor& a, double b) {
  return compare_with_number(CompareOp::Ne, a, b);
}
Tensor lt(const Tensor& a, double b) {
  return compare_with_number(CompareOp::Lt, a, b);
}
Tensor le(const Tensor& a, double b) {
  return compare_with_number(CompareOp::Le, a, b);
}
Tensor gt(const Tensor& a, double b) {
  return compare_with_number(CompareOp::Gt, a, b);
}
Tensor ge(const Tensor& a, double b) {
  return compare_with_number(CompareOp::Ge, a, b);
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_defined("where", condition, "condition");
  check_defined("where", a);
  check_defined("where", b);
  TG_CHECK(condition.dtype() == kBool, "where: the condition must be bool, got ", condition.dtype());
  check_same_device("where", condition, a);
  check_same_device("where", a, b);
  DType dt = promote_types(a.dtype(), b.dtype());
  Tensor ca = cast(a, dt), cb = cast(b, dt);
  Shape shape = broadcast_shapes("where", broadcast_shapes("where", condition.sizes(), ca.sizes()), cb.sizes());
  Tensor out = empty_tensor(shape, dt, a.device());
  if (out.numel() > 0)
    TG_KERNEL(a.device(), where)(expand_raw(condition, shape), expand_raw(ca, shape), expand_raw(cb, shape), out);
  if (any_requires_grad({ca, cb})) {
    SavedTensor cond = condition;
    Shape a_shape = ca.sizes(), b_shape = cb.sizes();
    bool need_a = ca.requires_grad(), need_b = cb.requires_grad();
    record("where", {ca, cb}, {out}, [=](const std::vector<Tensor>& g) {
      Tensor c = cond.get();
      Tensor zero = zeros({}, TensorOptions(g[0].dtype()).device(g[0].device()));
      return std::vector<Tensor>{need_a ? sum_to(where(c, g[0], zero), a_shape) : Tensor(),
                                 need_b ? sum_to(where(c, zero, g[0]), b_shape) : Tensor()};
    });
  }
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, double b) {
  check_defined("where", a);
  // The scalar rule of the arithmetic ops: a fractional scalar makes an integral result float32.
  DType dt = a.dtype();
  if (is_integral(dt) && !(std::isfinite(b) && std::floor(b) == b)) dt = kFloat32;
  return where(condition, a, full({}, b, TensorOptions(dt).device(a.device())));
}

Tensor clamp(const Tensor& x, double min, double max) {
  check_defined("clamp", x);
  TG_CHECK(!(min > max), "clamp: min ", min, " is greater than max ", max);
  TG_CHECK(x.dtype() != kBool, "clamp: not defined for bool tensors");
  Tensor out = empty_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) TG_KERNEL(x.device(), clamp)(x, min, max, out);
  if (any_requires_grad({x})) {
    SavedTensor saved = x;
    record("clamp", {x}, {out}, [saved, min, max](const std::vector<Tensor>& g) {
      Tensor in = saved.get();
      return std::vector<Tensor>{where(ge(in, min), where(le(in, max), g[0], 0.0), 0.0)};
    });
  }
  return out;
}

Tensor& Tensor::clamp_(double min, double max) {
  TG_CHECK(!(min > max), "clamp_: min ", min, " is greater than max ", max);
  check_inplace("clamp_", *this);
  if (any_requires_grad({*this})) {
    adopt_result(*this, clamp(clone(), min, max));
    return *this;
  }
  if (numel() > 0) TG_KERNEL(device(), clamp)(*this, min, max, *this);
  storage()->bump_version();
  return *this;
}

}  // namespace tapegrad
