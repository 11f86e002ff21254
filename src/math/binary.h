// The binary and comparison formulas, host+device.
#pragma once

#include <cmath>

#include "math/host_device.h"

namespace tapegrad::math {

struct AddOp { template <class T> TG_HD static T apply(T a, T b) { return a + b; } };
struct SubOp { template <class T> TG_HD static T apply(T a, T b) { return a - b; } };
struct MulOp { template <class T> TG_HD static T apply(T a, T b) { return a * b; } };
struct DivOp { template <class T> TG_HD static T apply(T a, T b) { return a / b; } };
struct PowOp {
  template <class T> TG_HD static T apply(T a, T b) { return static_cast<T>(pow(a, b)); }
};
// NaN propagates, like torch.maximum.
struct MaximumOp {
  template <class T> TG_HD static T apply(T a, T b) { return (a != a || a > b) ? a : b; }
};
struct MinimumOp {
  template <class T> TG_HD static T apply(T a, T b) { return (a != a || a < b) ? a : b; }
};

struct EqOp { template <class T> TG_HD static bool apply(T a, T b) { return a == b; } };
struct NeOp { template <class T> TG_HD static bool apply(T a, T b) { return a != b; } };
struct LtOp { template <class T> TG_HD static bool apply(T a, T b) { return a < b; } };
struct LeOp { template <class T> TG_HD static bool apply(T a, T b) { return a <= b; } };
struct GtOp { template <class T> TG_HD static bool apply(T a, T b) { return a > b; } };
struct GeOp { template <class T> TG_HD static bool apply(T a, T b) { return a >= b; } };

}  // namespace tapegrad::math
