// Binary arithmetic and comparisons on CUDA, with the formulas of math/binary.h. Operands arrive
// broadcast to out's shape and share one dtype; `out` may alias `a` (in-place ops). f16 and bf16
// compute in float; integers use the integer formulas the CPU uses (exact integer pow).
#include "kernels/dispatch.h"
#include "kernels/pointwise_loop.cuh"
#include "math/op_switch.h"
#include "register.h"

namespace tapegrad::cuda_backend {

using backend::BinaryOp;
using backend::CompareOp;

namespace {

template <class Op, class T>
struct BinaryFn {
  __device__ T operator()(T a, T b) const {
    return convert<T>(Op::apply(static_cast<Acc<T>>(a), static_cast<Acc<T>>(b)));
  }
};

template <class Op, class T>
struct CompareFn {
  __device__ bool operator()(T a, T b) const { return Op::apply(static_cast<Acc<T>>(a), static_cast<Acc<T>>(b)); }
};

// The scalar operand arrives converted to T and widened, as a 0-d tensor of a's dtype would be read.
template <class Op, class T>
struct BinaryScalarFn {
  Acc<T> b;
  __device__ T operator()(T a) const { return convert<T>(Op::apply(static_cast<Acc<T>>(a), b)); }
};

template <class Op, class T>
struct CompareScalarFn {
  Acc<T> b;
  __device__ bool operator()(T a) const { return Op::apply(static_cast<Acc<T>>(a), b); }
};

// Overwrites out (which may alias a).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = backend::binary_op_name(op);
  dispatch_numeric(out.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    math::with_binary_op(
        op, [&](auto formula) { launch_pointwise<T, T, T>(name, BinaryFn<decltype(formula), T>{}, out, a, b); });
  });
}

// Overwrites the bool out; a and b share any dtype, bool included.
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    math::with_compare_op(op, [&](auto formula) {
      launch_pointwise<bool, T, T>("compare", CompareFn<decltype(formula), T>{}, out, a, b);
    });
  });
}

// Overwrites out (which may alias a) with a (op) b; a and out share a floating dtype.
void binary_scalar(BinaryOp op, const Tensor& a, double b, const Tensor& out) {
  const char* name = backend::binary_op_name(op);
  dispatch_floating_and_half(out.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    math::with_binary_op(op, [&](auto formula) {
      const BinaryScalarFn<decltype(formula), T> fn{static_cast<Acc<T>>(convert<T>(b))};
      launch_pointwise<T, T>(name, fn, out, a);
    });
  });
}

// Overwrites the bool out with a (op) b, b converted to a's dtype.
void compare_scalar(CompareOp op, const Tensor& a, double b, const Tensor& out) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    math::with_compare_op(op, [&](auto formula) {
      const CompareScalarFn<decltype(formula), T> fn{static_cast<Acc<T>>(convert<T>(b))};
      launch_pointwise<bool, T>("compare", fn, out, a);
    });
  });
}

}  // namespace

void register_binary(backend::KernelTable& table) {
  table.binary = binary;
  table.compare = compare;
  table.binary_scalar = binary_scalar;
  table.compare_scalar = compare_scalar;
}

}  // namespace tapegrad::cuda_backend
