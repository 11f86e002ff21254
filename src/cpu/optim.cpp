// Fused optimiser updates on the CPU: one parallel pass per parameter over the shared formulas,
// and the multi-tensor forms, one parallel pass over the elements of all parameters together.
#include <algorithm>

#include "cpu/cpu_kernels.h"
#include "cpu/dtype_dispatch.h"
#include "cpu/parallel.h"

namespace tapegrad::cpu {

namespace {

// Calls segment(entry, begin, end) for the elements [begin, end) of each entry, with the entries'
// elements laid end to end and the whole range split among threads, so many small parameters
// share one parallel region instead of each running serially. Each element is updated by the same
// code as the one-parameter kernels, so the results are bit-identical to theirs.
template <class Entry, class Segment>
void for_each_element_range(const std::vector<Entry>& entries, int64_t grain, const Segment& segment) {
  std::vector<int64_t> starts(entries.size() + 1, 0);
  for (size_t i = 0; i < entries.size(); ++i) starts[i + 1] = starts[i] + entries[i].param.numel();
  parallel_for(0, starts.back(), grain, [&](int64_t begin, int64_t end) {
    // The last entry starting at or before `begin` (empty entries share a start with the next one).
    size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    for (; i < entries.size() && starts[i] < end; ++i) {
      const int64_t lo = std::max(begin, starts[i]) - starts[i], hi = std::min(end, starts[i + 1]) - starts[i];
      if (lo < hi) segment(entries[i], lo, hi);
    }
  });
}

// Inside the parallel region nothing may throw, so dtypes are checked before it.
template <class Entry>
void check_floating_params(const std::vector<Entry>& entries, const char* op) {
  for (const Entry& e : entries) dispatch_floating(e.param.dtype(), op, [](auto) {});
}

}  // namespace

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

// Updates every param and momentum buffer in place.
void sgd_step_many(const std::vector<backend::SgdTensors>& params, const math::SgdHyper& hyper) {
  check_floating_params(params, "sgd_step_many");
  for_each_element_range(params, kGrainSize, [&](const backend::SgdTensors& e, int64_t begin, int64_t end) {
    dispatch_floating(e.param.dtype(), "sgd_step_many", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = static_cast<T*>(e.param.data_ptr());
      const T* g = static_cast<const T*>(e.grad.data_ptr());
      T* buf = e.momentum_buffer.defined() ? static_cast<T*>(e.momentum_buffer.data_ptr()) : nullptr;
      for (int64_t i = begin; i < end; ++i) math::sgd_update<T>(p[i], g[i], buf ? buf + i : nullptr, hyper);
    });
  });
}

// Updates every param, exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq in place.
void adam_step_many(const std::vector<backend::AdamTensors>& params, const math::AdamHyper& hyper) {
  check_floating_params(params, "adam_step_many");
  for_each_element_range(params, 8192, [&](const backend::AdamTensors& e, int64_t begin, int64_t end) {
    dispatch_floating(e.param.dtype(), "adam_step_many", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = static_cast<T*>(e.param.data_ptr());
      const T* g = static_cast<const T*>(e.grad.data_ptr());
      T* m = static_cast<T*>(e.exp_avg.data_ptr());
      T* v = static_cast<T*>(e.exp_avg_sq.data_ptr());
      T* v_max = e.max_exp_avg_sq.defined() ? static_cast<T*>(e.max_exp_avg_sq.data_ptr()) : nullptr;
      for (int64_t i = begin; i < end; ++i)
        math::adam_update<T>(p[i], g[i], m[i], v[i], v_max ? v_max + i : nullptr, hyper);
    });
  });
}

}  // namespace tapegrad::cpu
