// The launch/GEMM/copy/host-sync counters (tapegrad/cuda/counters.h): plain atomics with no CUDA
// dependency, so every build has them and a build without CUDA reports zeros.
#include "tapegrad/cuda/counters.h"

#include <initializer_list>

namespace tapegrad::cuda {

namespace detail {
std::atomic<uint64_t> g_launches{0}, g_gemms{0}, g_copies{0}, g_host_syncs{0};
}  // namespace detail

Counters operator-(const Counters& a, const Counters& b) {
  return {a.launches - b.launches, a.gemms - b.gemms, a.copies - b.copies, a.host_syncs - b.host_syncs};
}

Counters counters() {
  Counters c;
  c.launches = detail::g_launches.load(std::memory_order_relaxed);
  c.gemms = detail::g_gemms.load(std::memory_order_relaxed);
  c.copies = detail::g_copies.load(std::memory_order_relaxed);
  c.host_syncs = detail::g_host_syncs.load(std::memory_order_relaxed);
  return c;
}

void reset_counters() {
  for (auto* counter : {&detail::g_launches, &detail::g_gemms, &detail::g_copies, &detail::g_host_syncs})
    counter->store(0, std::memory_order_relaxed);
}

}  // namespace tapegrad::cuda
