// Forward and backward formulas of the unary ops, host+device, with each op's facts beside them.
// forward(x, s) = f(x); backward(g, x, y, s) = g * f'(x) given y = f(x), using whichever of x and y
// is cheaper. `s` holds the op's scalar parameters (leaky_relu's slope, softplus's beta and
// threshold), already in the compute type; ops without parameters ignore it, at no cost once inlined.
//
// Facts every formula states (read by the ops and the backends through math/op_switch.h):
//   kIntegers  defined on int32/int64 (others promote an integer input to float32, like exp);
//   kCheap     a few cycles per element (no libm call): the CPU's larger parallel grain;
//   kReads     what the backward reads besides the gradient, so the op saves only that.
#pragma once

#include <cmath>

#include "math/host_device.h"
#include "math/scalars.h"

namespace tapegrad::math {

enum class BackwardReads {
  Nothing,
  Input,
  Result,
  InputAndResult,
  ResultAsInput,  // reads x, but f(x) stands in for it (relu: f(x) > 0 exactly when x > 0)
};

struct NegOp {
  static constexpr bool kIntegers = true, kCheap = true;
  static constexpr BackwardReads kReads = BackwardReads::Nothing;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return -x;
  }
  template <class T>
  TG_HD static T backward(T g, T, T, Scalars<T>) {
    return -g;
  }
};
struct AbsOp {
  static constexpr bool kIntegers = true, kCheap = true;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return x < T(0) ? -x : x;
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T>) {
    return x > T(0) ? g : (x < T(0) ? -g : T(0));
  }
};
struct ExpOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Result;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return exp(x);
  }
  template <class T>
  TG_HD static T backward(T g, T, T y, Scalars<T>) {
    return g * y;
  }
};
struct LogOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return log(x);
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T>) {
    return g / x;
  }
};
struct SqrtOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Result;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return sqrt(x);
  }
  template <class T>
  TG_HD static T backward(T g, T, T y, Scalars<T>) {
    return g / (T(2) * y);
  }
};
struct RsqrtOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::InputAndResult;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return T(1) / sqrt(x);
  }
  template <class T>
  TG_HD static T backward(T g, T x, T y, Scalars<T>) {
    return T(-0.5) * g * y / x;
  }
};
struct TanhOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Result;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return tanh(x);
  }
  template <class T>
  TG_HD static T backward(T g, T, T y, Scalars<T>) {
    return g * (T(1) - y * y);
  }
};
struct SigmoidOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Result;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return T(1) / (T(1) + exp(-x));
  }
  template <class T>
  TG_HD static T backward(T g, T, T y, Scalars<T>) {
    return g * y * (T(1) - y);
  }
};
// relu saves only its output, which the next layer keeps anyway, so its input can be freed.
struct ReluOp {
  static constexpr bool kIntegers = true, kCheap = true;
  static constexpr BackwardReads kReads = BackwardReads::ResultAsInput;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return x < T(0) ? T(0) : x;
  }  // NaN stays NaN
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T>) {
    return x > T(0) ? g : T(0);
  }
};
// gelu(x) = x * Phi(x), Phi the standard normal CDF; gelu'(x) = Phi(x) + x * phi(x).
struct GeluOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T>) {
    T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
    T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
struct SquareOp {
  static constexpr bool kIntegers = true, kCheap = true;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return x * x;
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T>) {
    return T(2) * g * x;
  }
};

// The parameterised activations, with PyTorch's formulas (aten/src/ATen/native/cpu/Activation.cpp)
// in the same order of operations. They read the input, not the result: with a negative slope or
// alpha the sign of f(x) no longer tells the branch.

// leaky_relu(x) = x > 0 ? x : slope * x; s.a = negative_slope.
struct LeakyReluOp {
  static constexpr bool kIntegers = false, kCheap = true;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T> s) {
    return x > T(0) ? x : x * s.a;
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T> s) {
    return x > T(0) ? g : g * s.a;
  }
};
// softplus(x) = log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (where the two
// agree to working precision and exp would overflow); s.a = beta, s.b = threshold.
struct SoftplusOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T> s) {
    return x * s.a > s.b ? x : static_cast<T>(log1p(exp(x * s.a))) / s.a;
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T> s) {
    const T z = exp(x * s.a);
    return x * s.a > s.b ? g : g * z / (z + T(1));
  }
};
// silu(x) = x sigmoid(x), written as PyTorch's CPU kernel writes it (x / (1 + exp(-x))); its
// derivative is sigmoid(x) (1 + x (1 - sigmoid(x))).
struct SiluOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T>) {
    return x / (T(1) + exp(-x));
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T>) {
    const T sigmoid = T(1) / (T(1) + exp(-x));
    return g * sigmoid * (T(1) + x * (T(1) - sigmoid));
  }
};
// elu(x) = x > 0 ? x : alpha (exp(x) - 1); elu'(x) = alpha exp(x) for x <= 0; s.a = alpha.
struct EluOp {
  static constexpr bool kIntegers = false, kCheap = false;
  static constexpr BackwardReads kReads = BackwardReads::Input;
  template <class T>
  TG_HD static T forward(T x, Scalars<T> s) {
    return x <= T(0) ? static_cast<T>(expm1(x)) * s.a : x;
  }
  template <class T>
  TG_HD static T backward(T g, T x, T, Scalars<T> s) {
    return x <= T(0) ? g * s.a * static_cast<T>(exp(x)) : g;
  }
};

}  // namespace tapegrad::math
