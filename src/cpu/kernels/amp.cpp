// GradScaler's fused found-inf check and unscale on the CPU: one parallel pass over the elements
// of all the gradients together (laid end to end, as the multi-tensor optimiser steps do), each
// chunk keeping its own flag, so threads never write a shared location per element.
#include "math/amp.h"

#include <algorithm>
#include <atomic>

#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/register.h"

namespace tapegrad::cpu {

namespace {

// Unscales n elements at g; returns whether any was inf or NaN.
template <class T>
bool unscale_range(T* g, int64_t n, float inv_scale) {
  using A = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
  bool non_finite = false;
  for (int64_t i = 0; i < n; ++i) {
    const A v = convert<A>(g[i]);
    non_finite |= !math::is_finite(v);
    g[i] = convert<T>(math::unscale_value(v, inv_scale));
  }
  return non_finite;
}

bool unscale_segment(const Tensor& grad, int64_t begin, int64_t end, float inv_scale) {
  switch (grad.dtype()) {
    case DType::Float32:
      return unscale_range(static_cast<float*>(grad.data_ptr()) + begin, end - begin, inv_scale);
    case DType::Float64:
      return unscale_range(static_cast<double*>(grad.data_ptr()) + begin, end - begin, inv_scale);
    case DType::Float16:
      return unscale_range(static_cast<Half*>(grad.data_ptr()) + begin, end - begin, inv_scale);
    case DType::BFloat16:
      return unscale_range(static_cast<BFloat16*>(grad.data_ptr()) + begin, end - begin, inv_scale);
    default:
      return false;  // checked before the parallel region
  }
}

// Updates every gradient in place; sets *found_inf to 1 if any element was not finite.
void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  const char* op = "non_finite_check_and_unscale";
  TG_ASSERT(found_inf.dtype() == kFloat32 && found_inf.numel() == 1 && inv_scale.dtype() == kFloat32 &&
                inv_scale.numel() == 1,
            op, ": found_inf and inv_scale must be one-element float32 tensors");
  for (const Tensor& g : grads) {
    TG_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64 || g.dtype() == kFloat16 || g.dtype() == kBFloat16, op,
             ": gradients must be float32, float64, float16 or bfloat16, got ", g.dtype());
    TG_ASSERT(g.is_contiguous() && g.device().is_cpu(), op, ": gradient not contiguous or not on the cpu");
  }
  const float inv = *static_cast<const float*>(inv_scale.data_ptr());
  std::vector<int64_t> starts(grads.size() + 1, 0);
  for (size_t i = 0; i < grads.size(); ++i) starts[i + 1] = starts[i] + grads[i].numel();
  std::atomic<bool> any_non_finite{false};
  parallel_for(0, starts.back(), kGrainSize, [&](int64_t begin, int64_t end) {
    // The last tensor starting at or before `begin` (empty tensors share a start with the next).
    size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    bool non_finite = false;
    for (; i < grads.size() && starts[i] < end; ++i) {
      const int64_t lo = std::max(begin, starts[i]) - starts[i], hi = std::min(end, starts[i + 1]) - starts[i];
      if (lo < hi) non_finite |= unscale_segment(grads[i], lo, hi, inv);
    }
    if (non_finite) any_non_finite.store(true, std::memory_order_relaxed);
  });
  if (any_non_finite.load()) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

}  // namespace

void register_amp(backend::KernelTable& t) {
  t.non_finite_check_and_unscale = non_finite_check_and_unscale;
}

}  // namespace tapegrad::cpu
