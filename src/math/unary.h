// Forward and backward formulas of the unary ops, host+device. backward(g, x, y) returns
// g * f'(x) given y = f(x), using whichever of x and y is cheaper.
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

struct NegOp {
  template <class T> TG_HD static T forward(T x) { return -x; }
  template <class T> TG_HD static T backward(T g, T, T) { return -g; }
};
struct AbsOp {
  template <class T> TG_HD static T forward(T x) { return x < T(0) ? -x : x; }
  template <class T> TG_HD static T backward(T g, T x, T) { return x > T(0) ? g : (x < T(0) ? -g : T(0)); }
};
struct ExpOp {
  template <class T> TG_HD static T forward(T x) { return exp(x); }
  template <class T> TG_HD static T backward(T g, T, T y) { return g * y; }
};
struct LogOp {
  template <class T> TG_HD static T forward(T x) { return log(x); }
  template <class T> TG_HD static T backward(T g, T x, T) { return g / x; }
};
struct SqrtOp {
  template <class T> TG_HD static T forward(T x) { return sqrt(x); }
  template <class T> TG_HD static T backward(T g, T, T y) { return g / (T(2) * y); }
};
struct RsqrtOp {
  template <class T> TG_HD static T forward(T x) { return T(1) / sqrt(x); }
  template <class T> TG_HD static T backward(T g, T x, T y) { return T(-0.5) * g * y / x; }
};
struct TanhOp {
  template <class T> TG_HD static T forward(T x) { return tanh(x); }
  template <class T> TG_HD static T backward(T g, T, T y) { return g * (T(1) - y * y); }
};
struct SigmoidOp {
  template <class T> TG_HD static T forward(T x) { return T(1) / (T(1) + exp(-x)); }
  template <class T> TG_HD static T backward(T g, T, T y) { return g * y * (T(1) - y); }
};
struct ReluOp {
  template <class T> TG_HD static T forward(T x) { return x < T(0) ? T(0) : x; }  // NaN stays NaN
  template <class T> TG_HD static T backward(T g, T x, T) { return x > T(0) ? g : T(0); }
};
// gelu(x) = x * Phi(x), Phi the standard normal CDF; gelu'(x) = Phi(x) + x * phi(x).
struct GeluOp {
  template <class T> TG_HD static T forward(T x) { return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440))); }
  template <class T> TG_HD static T backward(T g, T x, T) {
    T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
    T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
struct SquareOp {
  template <class T> TG_HD static T forward(T x) { return x * x; }
  template <class T> TG_HD static T backward(T g, T x, T) { return T(2) * g * x; }
};

}  // namespace tapegrad::math
