// Fused optimiser updates on the CPU: one parallel pass per parameter over the shared formulas,
// and the multi-tensor forms, one parallel pass over the elements of all parameters together.
//
// Note [vectorised optimiser loops]: the loops below are plain element loops over the shared
// formulas of math/optim.h, templated on the options so that no per-element branch remains, with
// the hyperparameters converted to T once per step. Two compiler settings make them vectorise
// without changing a single result:
//  - -fno-math-errno (CMakeLists.txt, for this file): otherwise GCC keeps, beside each sqrt, a
//    branch to the C library's sqrtf in case errno must be set, and a loop with a call does not
//    vectorise (a second moment is never negative, so errno would never be set anyway; GCC 12
//    ignores this option in an optimize pragma);
//  - fp-contract=off (the pragma below): the AVX2/AVX-512 clones must not fuse a*b+c into an FMA,
//    so every clone, the portable one included, rounds exactly as the unfused formula does and the
//    results do not depend on the machine. It comes before every include so that the formulas'
//    template instances get it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "math/optim.h"

#include <omp.h>

#include <algorithm>

#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/register.h"

// The library is built for the baseline x86-64 so that it runs anywhere; the hot loops are also
// compiled for AVX2 and AVX-512 and the best one the CPU supports is picked once, at load time
// (an ifunc). Elsewhere (other compilers or architectures) they are compiled once.
// Not under ThreadSanitizer: its runtime is not ready when the loader runs ifunc resolvers.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && !defined(__SANITIZE_THREAD__)
#define TG_OPTIM_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define TG_OPTIM_CLONES
#endif

#if defined(__GNUC__)
#define TG_OPTIM_INLINE inline __attribute__((always_inline))
#else
#define TG_OPTIM_INLINE inline
#endif

namespace tapegrad::cpu {

namespace {

// Adam's update is about 28 bytes of memory traffic per element, SGD's 12 to 20: below these many
// elements a second thread costs more than it saves. For Adam that is more than waking it: the
// gradients were just written on the calling thread's core, and the other core has to fetch its
// half from there. On a 2-vCPU virtual machine whose cores sometimes sit on different Zen 5 CCDs,
// 83k parameters (`lstm_small`) took 69 us on 2 threads against 16 us on one; on 2 threads of one
// CCD 13 us. So up to 2^17 elements (3.5 MiB of traffic) stay on the calling thread.
constexpr int64_t kAdamGrain = int64_t{1} << 17;
constexpr int64_t kSgdGrain = 16384;

// ---- SGD -------------------------------------------------------------------------------------

// One parameter's pointers; `buf` is null without momentum.
template <class T>
struct SgdPointers {
  T* p;
  const T* g;
  T* buf;
};

template <class T, bool kDecay, math::SgdMomentum kMomentum, bool kNesterov>
TG_OPTIM_INLINE void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n,
                              const math::SgdConstants<T>& constants) {
  const math::SgdConstants<T> c = constants;  // a local copy: no store in the loop can change it
  for (int64_t i = 0; i < n; ++i)
    math::sgd_update<T, kDecay, kMomentum, kNesterov>(p[i], g[i],
                                                      kMomentum == math::SgdMomentum::None ? nullptr : buf + i, c);
}

// Elements [begin, end) of one parameter, the options chosen once for the whole range.
template <class T>
TG_OPTIM_INLINE void sgd_range_impl(const SgdPointers<T>& a, int64_t begin, int64_t end, const math::SgdConstants<T>& c,
                                    math::SgdMomentum momentum, bool decay, bool nesterov) {
  using math::SgdMomentum;
  T* p = a.p + begin;
  const T* g = a.g + begin;
  T* buf = a.buf != nullptr ? a.buf + begin : nullptr;
  const int64_t n = end - begin;
  switch (momentum) {
    case SgdMomentum::None:
      if (decay)
        sgd_loop<T, true, SgdMomentum::None, false>(p, g, buf, n, c);
      else
        sgd_loop<T, false, SgdMomentum::None, false>(p, g, buf, n, c);
      return;
    case SgdMomentum::First:
      if (nesterov) {
        if (decay)
          sgd_loop<T, true, SgdMomentum::First, true>(p, g, buf, n, c);
        else
          sgd_loop<T, false, SgdMomentum::First, true>(p, g, buf, n, c);
      } else {
        if (decay)
          sgd_loop<T, true, SgdMomentum::First, false>(p, g, buf, n, c);
        else
          sgd_loop<T, false, SgdMomentum::First, false>(p, g, buf, n, c);
      }
      return;
    case SgdMomentum::Running:
      if (nesterov) {
        if (decay)
          sgd_loop<T, true, SgdMomentum::Running, true>(p, g, buf, n, c);
        else
          sgd_loop<T, false, SgdMomentum::Running, true>(p, g, buf, n, c);
      } else {
        if (decay)
          sgd_loop<T, true, SgdMomentum::Running, false>(p, g, buf, n, c);
        else
          sgd_loop<T, false, SgdMomentum::Running, false>(p, g, buf, n, c);
      }
      return;
  }
}

// The cloned entry points (one per dtype: target_clones takes plain functions, not templates).
TG_OPTIM_CLONES void sgd_range(const SgdPointers<float>& a, int64_t begin, int64_t end,
                               const math::SgdConstants<float>& c, math::SgdMomentum momentum, bool decay,
                               bool nesterov) {
  sgd_range_impl(a, begin, end, c, momentum, decay, nesterov);
}
TG_OPTIM_CLONES void sgd_range(const SgdPointers<double>& a, int64_t begin, int64_t end,
                               const math::SgdConstants<double>& c, math::SgdMomentum momentum, bool decay,
                               bool nesterov) {
  sgd_range_impl(a, begin, end, c, momentum, decay, nesterov);
}

// Everything an SGD pass needs besides the pointers, resolved once per step.
struct SgdPlan {
  math::SgdConstants<float> f32;
  math::SgdConstants<double> f64;
  math::SgdMomentum momentum;
  bool decay, nesterov;

  explicit SgdPlan(const math::SgdHyper& h)
      : f32(math::sgd_constants<float>(h)),
        f64(math::sgd_constants<double>(h)),
        momentum(math::sgd_momentum_mode(h)),
        decay(h.weight_decay != 0),
        nesterov(h.nesterov) {}

  void run(const SgdPointers<float>& a, int64_t begin, int64_t end) const {
    sgd_range(a, begin, end, f32, momentum, decay, nesterov);
  }
  void run(const SgdPointers<double>& a, int64_t begin, int64_t end) const {
    sgd_range(a, begin, end, f64, momentum, decay, nesterov);
  }
};

template <class T>
SgdPointers<T> sgd_pointers(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer) {
  return {static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
          momentum_buffer.defined() ? static_cast<T*>(momentum_buffer.data_ptr()) : nullptr};
}

// ---- Adam ------------------------------------------------------------------------------------

// One parameter's pointers; `v_max` is null without amsgrad.
template <class T>
struct AdamPointers {
  T* p;
  const T* g;
  T* m;
  T* v;
  T* v_max;
};

template <class T, math::AdamDecay kDecay, bool kAmsgrad>
TG_OPTIM_INLINE void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                               T* __restrict v_max, int64_t n, const math::AdamConstants<T>& constants) {
  const math::AdamConstants<T> c = constants;  // a local copy: no store in the loop can change it
  for (int64_t i = 0; i < n; ++i)
    math::adam_update<T, kDecay, kAmsgrad>(p[i], g[i], m[i], v[i], kAmsgrad ? v_max + i : nullptr, c);
}

template <class T>
TG_OPTIM_INLINE void adam_range_impl(const AdamPointers<T>& a, int64_t begin, int64_t end,
                                     const math::AdamConstants<T>& c, math::AdamDecay decay, bool amsgrad) {
  using math::AdamDecay;
  T* p = a.p + begin;
  const T* g = a.g + begin;
  T* m = a.m + begin;
  T* v = a.v + begin;
  T* v_max = a.v_max != nullptr ? a.v_max + begin : nullptr;
  const int64_t n = end - begin;
  if (amsgrad) {
    if (decay == AdamDecay::None)
      adam_loop<T, AdamDecay::None, true>(p, g, m, v, v_max, n, c);
    else if (decay == AdamDecay::L2)
      adam_loop<T, AdamDecay::L2, true>(p, g, m, v, v_max, n, c);
    else
      adam_loop<T, AdamDecay::Decoupled, true>(p, g, m, v, v_max, n, c);
  } else {
    if (decay == AdamDecay::None)
      adam_loop<T, AdamDecay::None, false>(p, g, m, v, v_max, n, c);
    else if (decay == AdamDecay::L2)
      adam_loop<T, AdamDecay::L2, false>(p, g, m, v, v_max, n, c);
    else
      adam_loop<T, AdamDecay::Decoupled, false>(p, g, m, v, v_max, n, c);
  }
}

TG_OPTIM_CLONES void adam_range(const AdamPointers<float>& a, int64_t begin, int64_t end,
                                const math::AdamConstants<float>& c, math::AdamDecay decay, bool amsgrad) {
  adam_range_impl(a, begin, end, c, decay, amsgrad);
}
TG_OPTIM_CLONES void adam_range(const AdamPointers<double>& a, int64_t begin, int64_t end,
                                const math::AdamConstants<double>& c, math::AdamDecay decay, bool amsgrad) {
  adam_range_impl(a, begin, end, c, decay, amsgrad);
}

// Everything an Adam pass needs besides the pointers, resolved once per step.
struct AdamPlan {
  math::AdamConstants<float> f32;
  math::AdamConstants<double> f64;
  math::AdamDecay decay;
  bool amsgrad;

  explicit AdamPlan(const math::AdamHyper& h)
      : f32(math::adam_constants<float>(h)),
        f64(math::adam_constants<double>(h)),
        decay(math::adam_decay_mode(h)),
        amsgrad(h.amsgrad) {}

  void run(const AdamPointers<float>& a, int64_t begin, int64_t end) const {
    adam_range(a, begin, end, f32, decay, amsgrad);
  }
  void run(const AdamPointers<double>& a, int64_t begin, int64_t end) const {
    adam_range(a, begin, end, f64, decay, amsgrad);
  }
};

template <class T>
AdamPointers<T> adam_pointers(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                              const Tensor& max_exp_avg_sq) {
  return {static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
          static_cast<T*>(exp_avg.data_ptr()), static_cast<T*>(exp_avg_sq.data_ptr()),
          max_exp_avg_sq.defined() ? static_cast<T*>(max_exp_avg_sq.data_ptr()) : nullptr};
}

// ---- multi-tensor ----------------------------------------------------------------------------

// Calls segment(entry, begin, end) for the elements [begin, end) of each entry, all in one parallel
// region, so that many small parameters do not each run serially. Note [each thread its share of
// every parameter]: thread p of P takes the p-th P-th of every parameter (edges on multiples of 16
// elements), not the p-th P-th of all of them laid end to end. A layer's forward product splits its
// output columns, the weight's rows, among the threads the same way, so each thread updates the
// rows its own core reads next, which matters where the cores do not share a last-level cache; laid
// end to end, thread 0 of mlp_fashion took 2/3 of its first weight, and Adam's step took 0.064-0.087
// ms (one L3) against 0.057-0.062 split per parameter. Each element is updated by the same code as
// the one-parameter kernels, so the results are bit-identical to theirs. Up to `grain` elements in
// all stay on the calling thread.
template <class Entry, class Segment>
void for_each_element_range(const std::vector<Entry>& entries, int64_t grain, const Segment& segment) {
  int64_t total = 0;
  for (const Entry& e : entries) total += e.param.numel();
  const int threads = get_num_threads();
  if (total <= grain || threads <= 1 || omp_in_parallel()) {
    for (const Entry& e : entries)
      if (e.param.numel() > 0) segment(e, 0, e.param.numel());
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
    const auto edge = [&](int64_t n, int64_t p) { return p >= parts ? n : std::min(n, n * p / parts / 16 * 16); };
    for (const Entry& e : entries) {
      const int64_t n = e.param.numel(), lo = edge(n, part), hi = edge(n, part + 1);
      if (lo < hi) segment(e, lo, hi);
    }
  }
}

// Inside the parallel region nothing may throw, so dtypes are checked before it.
template <class Entry>
void check_floating_params(const std::vector<Entry>& entries, const char* op) {
  for (const Entry& e : entries) dispatch_floating(e.param.dtype(), op, [](auto) {});
}

// Updates param and momentum_buffer in place.
void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const math::SgdHyper& hyper) {
  const SgdPlan plan(hyper);
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SgdPointers<T> a = sgd_pointers<T>(param, grad, momentum_buffer);
    parallel_for(0, param.numel(), kSgdGrain, [&](int64_t b, int64_t e) { plan.run(a, b, e); });
  });
}

// Updates param, exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq in place.
void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const math::AdamHyper& hyper) {
  const AdamPlan plan(hyper);
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const AdamPointers<T> a = adam_pointers<T>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq);
    parallel_for(0, param.numel(), kAdamGrain, [&](int64_t b, int64_t e) { plan.run(a, b, e); });
  });
}

// Updates every param and momentum buffer in place.
void sgd_step_many(const std::vector<backend::SgdTensors>& params, const math::SgdHyper& hyper) {
  check_floating_params(params, "sgd_step_many");
  const SgdPlan plan(hyper);
  for_each_element_range(params, kSgdGrain, [&](const backend::SgdTensors& e, int64_t begin, int64_t end) {
    if (e.param.dtype() == kFloat32)
      plan.run(sgd_pointers<float>(e.param, e.grad, e.momentum_buffer), begin, end);
    else
      plan.run(sgd_pointers<double>(e.param, e.grad, e.momentum_buffer), begin, end);
  });
}

// Updates every param, exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq in place.
void adam_step_many(const std::vector<backend::AdamTensors>& params, const math::AdamHyper& hyper) {
  check_floating_params(params, "adam_step_many");
  math::AdamHyper h = hyper;
  if (!params.empty() && params[0].step.defined()) {  // capturable: the count is the tensor's
    for (const backend::AdamTensors& e : params) *static_cast<float*>(e.step.data_ptr()) += 1.0f;
    h.step = static_cast<const float*>(params[0].step.data_ptr());
  }
  const AdamPlan plan(math::adam_hyper_resolved(h));
  for_each_element_range(params, kAdamGrain, [&](const backend::AdamTensors& e, int64_t begin, int64_t end) {
    if (e.param.dtype() == kFloat32)
      plan.run(adam_pointers<float>(e.param, e.grad, e.exp_avg, e.exp_avg_sq, e.max_exp_avg_sq), begin, end);
    else
      plan.run(adam_pointers<double>(e.param, e.grad, e.exp_avg, e.exp_avg_sq, e.max_exp_avg_sq), begin, end);
  });
}

}  // namespace

void register_optim(backend::KernelTable& t) {
  t.sgd_step = sgd_step;
  t.adam_step = adam_step;
  t.sgd_step_many = sgd_step_many;
  t.adam_step_many = adam_step_many;
}

}  // namespace tapegrad::cpu
