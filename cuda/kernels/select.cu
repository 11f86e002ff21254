// where and clamp on CUDA, with the formulas of math/select.h.
#include "kernels/dispatch.h"
#include "kernels/pointwise_loop.cuh"
#include "math/select.h"
#include "register.h"

namespace tapegrad::cuda_backend {

namespace {

template <class T>
struct WhereFn {
  __device__ T operator()(bool c, T a, T b) const { return math::select(c, a, b); }
};

// Decided in double like the CPU; 16-bit floats go through float first (exactly).
template <class T>
struct ClampFn {
  double lo, hi;
  __device__ T operator()(T x) const { return convert<T>(math::clamp_value(static_cast<Acc<T>>(x), lo, hi)); }
};

// Overwrites out; every dtype (a pure selection, no arithmetic).
void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  TG_CHECK(condition.dtype() == kBool, "where: the condition must be bool, got ", condition.dtype());
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pointwise<T, bool, T, T>("where", WhereFn<T>{}, out, condition, a, b);
  });
}

// Overwrites out (which may alias x); NaN stays NaN.
void clamp(const Tensor& x, double min, double max, const Tensor& out) {
  dispatch_numeric(x.dtype(), "clamp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_pointwise<T, T>("clamp", ClampFn<T>{min, max}, out, x);
  });
}

}  // namespace

void register_select(backend::KernelTable& table) {
  table.where = where;
  table.clamp = clamp;
}

}  // namespace tapegrad::cuda_backend
