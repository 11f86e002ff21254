// Fused optimiser updates on the CPU: one parallel pass per parameter over the shared formulas.
#include "cpu/cpu_kernels.h"
#include "cpu/dtype_dispatch.h"
#include "cpu/parallel.h"

namespace tapegrad::cpu {

// Updates param and momentum_buffer in place.
void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const math::SgdHyper& hyper) {
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    T* buf = momentum_buffer.defined() ? static_cast<T*>(momentum_buffer.data_ptr()) : nullptr;
    parallel_for(0, param.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) math::sgd_update<T>(p[i], g[i], buf ? buf + i : nullptr, hyper);
    });
  });
}

// Updates param, exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq in place.
void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const math::AdamHyper& hyper) {
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    T* m = static_cast<T*>(exp_avg.data_ptr());
    T* v = static_cast<T*>(exp_avg_sq.data_ptr());
    T* v_max = max_exp_avg_sq.defined() ? static_cast<T*>(max_exp_avg_sq.data_ptr()) : nullptr;
    parallel_for(0, param.numel(), 8192, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) math::adam_update<T>(p[i], g[i], m[i], v[i], v_max ? v_max + i : nullptr, hyper);
    });
  });
}

}  // namespace tapegrad::cpu
