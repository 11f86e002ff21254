// The binary and comparison formulas, host+device.
#pragma once

#include <cmath>
#include <type_traits>

#include "math/host_device.h"

namespace tapegrad::math {

struct AddOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    return a + b;
  }
};
struct SubOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    return a - b;
  }
};
struct MulOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    return a * b;
  }
};
struct DivOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    return a / b;
  }
};
// Integer powers by squaring: exact, and wrapping on overflow like PyTorch's integer pow. A negative
// exponent gives 1 / a^|b| truncated toward zero: +-1 for a = +-1, else 0 (also for a = 0).
template <class T>
TG_HD T integer_pow(T base, T exponent) {
  if (exponent < 0) {
    if (base == 1) return T(1);
    if (base == -1) return (exponent & 1) ? T(-1) : T(1);
    return T(0);
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, square = static_cast<U>(base);
  for (U e = static_cast<U>(exponent); e != 0; e >>= 1) {
    if (e & 1) result *= square;
    square *= square;
  }
  return static_cast<T>(result);
}
struct PowOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return integer_pow(a, b);
    } else {
      return static_cast<T>(pow(a, b));
    }
  }
};
// NaN propagates, like torch.maximum.
struct MaximumOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    return (a != a || a > b) ? a : b;
  }
};
struct MinimumOp {
  template <class T>
  TG_HD static T apply(T a, T b) {
    return (a != a || a < b) ? a : b;
  }
};

struct EqOp {
  template <class T>
  TG_HD static bool apply(T a, T b) {
    return a == b;
  }
};
struct NeOp {
  template <class T>
  TG_HD static bool apply(T a, T b) {
    return a != b;
  }
};
struct LtOp {
  template <class T>
  TG_HD static bool apply(T a, T b) {
    return a < b;
  }
};
struct LeOp {
  template <class T>
  TG_HD static bool apply(T a, T b) {
    return a <= b;
  }
};
struct GtOp {
  template <class T>
  TG_HD static bool apply(T a, T b) {
    return a > b;
  }
};
struct GeOp {
  template <class T>
  TG_HD static bool apply(T a, T b) {
    return a >= b;
  }
};

}  // namespace tapegrad::math
