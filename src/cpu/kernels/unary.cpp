// Unary kernels on the CPU, forward and backward. The formulas are the shared host+device ones in
// src/math; float exp, tanh and sigmoid use vec_math.h's vectorisable versions, and 16-bit floats
// compute in float (Note [16-bit operands] in strided_loop.h). A file of its own
// (apart from pointwise.cpp) because every op times every dtype is instantiated here: split, the two
// compile side by side.
#include <type_traits>

#include "cpu/half/relu_16bit.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/strided_loop.h"
#include "cpu/loops/vec_math.h"
#include "cpu/register.h"
#include "math/op_switch.h"

namespace tapegrad::cpu {

using math::with_unary_op;

namespace {

// Grain for ops that cost tens of cycles per element (f64 exp and tanh, erf): threads pay off sooner.
constexpr int64_t kTranscendentalGrain = 4096;

// The unary formulas with a vectorised float version below.
template <class Op>
constexpr bool kHasVectorF32 =
    std::is_same_v<Op, math::ExpOp> || std::is_same_v<Op, math::TanhOp> || std::is_same_v<Op, math::SigmoidOp>;

// y = op(x) over contiguous floats (y may be x itself), vectorised per instruction set. A fraction of
// a nanosecond per element instead of a libm call each, so these ops use the cheap ops' grain.
TG_VECTOR_CLONES void unary_vector_f32(UnaryOp op, const float* x, float* y, int64_t n) {
  switch (op) {
    case UnaryOp::Exp:
      for (int64_t i = 0; i < n; ++i) y[i] = vec::exp(x[i]);
      return;
    case UnaryOp::Tanh:
      for (int64_t i = 0; i < n; ++i) y[i] = vec::tanh(x[i]);
      return;
    case UnaryOp::Sigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = vec::sigmoid(x[i]);
      return;
    default:
      TG_ASSERT(false, "unary_vector_f32: no vector version of ", backend::unary_op_name(op));
  }
}

// Overwrites out. The ops with kIntegers (math/unary.h) also run on integers. The scalars are
// converted to T once and copied into each chunk's loop, where they stay in registers: an op
// without parameters never reads them.
void unary(UnaryOp op, math::Scalars<double> scalars, const Tensor& x, const Tensor& out) {
  if (op == UnaryOp::Relu && relu_16bit(x, out)) return;  // Note [16-bit relu]
  const math::UnaryOpInfo& info = math::unary_op_info(op);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const math::Scalars<T> params = scalars.to<T>();
    with_unary_op(op, [&](auto formula) {
      using Op = decltype(formula);
      constexpr bool vector_f32 = std::is_same_v<T, float> && kHasVectorF32<Op>;
      for_each_compute<2>(
          {&out, &x}, {sizeof(T), sizeof(T)},
          [&](char** p, const int64_t* s, int64_t n) {
            const math::Scalars<T> c = params;
            if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
              T* o = reinterpret_cast<T*>(p[0]);
              const T* a = reinterpret_cast<const T*>(p[1]);
              if constexpr (vector_f32) {
                // The casts are no-ops (T is float here); clang checks this branch for every T.
                unary_vector_f32(op, reinterpret_cast<const float*>(a), reinterpret_cast<float*>(o), n);
              } else {
                for (int64_t i = 0; i < n; ++i) o[i] = Op::forward(a[i], c);
              }
            } else {
              for (int64_t i = 0; i < n; ++i)
                *reinterpret_cast<T*>(p[0] + i * s[0]) = Op::forward(*reinterpret_cast<const T*>(p[1] + i * s[1]), c);
            }
          },
          Op::kCheap || vector_f32 ? kGrainSize : kTranscendentalGrain);
    });
  };
  if (info.integers) {
    dispatch_numeric_compute(x.dtype(), info.name, run);
  } else {
    dispatch_floating_compute(x.dtype(), info.name, run);
  }
}

// Overwrites grad_x.
void unary_backward(UnaryOp op, math::Scalars<double> scalars, const Tensor& grad, const Tensor& x, const Tensor& y,
                    const Tensor& grad_x) {
  if (op == UnaryOp::Relu && relu_backward_16bit(grad, x, grad_x)) return;  // Note [16-bit relu]
  dispatch_floating_compute(x.dtype(), backend::unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const math::Scalars<T> params = scalars.to<T>();
    with_unary_op(op, [&](auto formula) {
      using Op = decltype(formula);
      map_ternary<T, T, T, T>(grad_x, grad, x, y, [params](T g, T a, T r) { return Op::backward(g, a, r, params); });
    });
  });
}

}  // namespace

void register_unary(backend::KernelTable& t) {
  t.unary = unary;
  t.unary_backward = unary_backward;
}

}  // namespace tapegrad::cpu
