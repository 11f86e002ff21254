// Binary, comparison, where and clamp kernels on the CPU (the unary ones are in unary.cpp). The
// formulas are the shared host+device ones in src/math; 16-bit floats compute in float (Note
// [16-bit operands] in strided_loop.h).
#include <cmath>

#include "cpu/kernels/shared_kernels.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/strided_loop.h"
#include "math/op_switch.h"
#include "math/select.h"

namespace tapegrad::cpu {

using math::with_binary_op;
using math::with_compare_op;

// Overwrites out (which may alias a for in-place ops).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_numeric_compute(out.dtype(), backend::binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_binary_op(op, [&](auto formula) {
      using Op = decltype(formula);
      map_binary<T, T>(out, a, b, [](T u, T v) { return Op::apply(u, v); });
    });
  });
}

namespace {

// Overwrites the bool out.
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_compare_op(op, [&](auto formula) {
      using Op = decltype(formula);
      map_binary<bool, T>(out, a, b, [](T u, T v) { return Op::apply(u, v); });
    });
  };
  if (a.dtype() == kBool) {
    run(TypeTag<bool>{});
  } else {
    dispatch_numeric_compute(a.dtype(), "compare", run);
  }
}

// Overwrites out.
void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_ternary<T, bool, T, T>(out, condition, a, b, [](bool c, T u, T v) { return math::select(c, u, v); });
  });
}

// Overwrites out; NaN stays NaN like torch.clamp.
void clamp(const Tensor& x, double min, double max, const Tensor& out) {
  dispatch_numeric_compute(x.dtype(), "clamp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_unary<T, T>(out, x, [min, max](T v) { return math::clamp_value(v, min, max); });
  });
}

}  // namespace

void register_pointwise(backend::KernelTable& t) {
  t.binary = binary;
  t.compare = compare;
  t.where = where;
  t.clamp = clamp;
}

}  // namespace tapegrad::cpu
