// Unary ops and their backward on CUDA, with the formulas of math/unary.h. f32 and f64 compute in
// their own precision, f16 and bf16 in float; the ops with kIntegers also run on integers (as on
// the CPU). An op's scalar parameters ride in the functor, converted once to the compute type.
#include "kernels/dispatch.h"
#include "kernels/pointwise_loop.cuh"
#include "math/op_switch.h"
#include "register.h"

namespace tapegrad::cuda_backend {

using backend::UnaryOp;

namespace {

template <class Op, class T>
struct UnaryForwardFn {
  math::Scalars<Acc<T>> params;
  __device__ T operator()(T x) const { return convert<T>(Op::forward(static_cast<Acc<T>>(x), params)); }
};

template <class Op, class T>
struct UnaryBackwardFn {
  math::Scalars<Acc<T>> params;
  __device__ T operator()(T g, T x, T y) const {
    using A = Acc<T>;
    return convert<T>(Op::backward(static_cast<A>(g), static_cast<A>(x), static_cast<A>(y), params));
  }
};

// Overwrites out.
void unary(UnaryOp op, math::Scalars<double> scalars, const Tensor& x, const Tensor& out) {
  const char* name = backend::unary_op_name(op);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    math::with_unary_op(op, [&](auto formula) {
      using Fn = UnaryForwardFn<decltype(formula), T>;
      launch_pointwise<T, T>(name, Fn{scalars.to<Acc<T>>()}, out, x);
    });
  };
  if (math::unary_accepts_integers(op)) {
    dispatch_numeric(x.dtype(), name, run);
  } else {
    dispatch_floating_and_half(x.dtype(), name, run);
  }
}

// Overwrites grad_x with grad * f'(x); grad, x and y share grad_x's dtype and shape.
void unary_backward(UnaryOp op, math::Scalars<double> scalars, const Tensor& grad, const Tensor& x, const Tensor& y,
                    const Tensor& grad_x) {
  const char* name = backend::unary_op_name(op);
  dispatch_floating_and_half(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    math::with_unary_op(op, [&](auto formula) {
      using Fn = UnaryBackwardFn<decltype(formula), T>;
      launch_pointwise<T, T, T, T>(name, Fn{scalars.to<Acc<T>>()}, grad_x, grad, x, y);
    });
  });
}

}  // namespace

void register_unary(backend::KernelTable& table) {
  table.unary = unary;
  table.unary_backward = unary_backward;
}

}  // namespace tapegrad::cuda_backend
