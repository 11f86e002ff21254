// Process-wide counts of what the CUDA backend asks of the GPU and of the host: kernel launches,
// GEMMs (cuBLAS / cuBLASLt calls), copies and memsets, and host synchronisations. Available in
// every build; without a CUDA backend they stay zero. Cheap (relaxed atomic increments), always on.
//
//   tapegrad::cuda::Counters before = tapegrad::cuda::counters();
//   train_step();
//   tapegrad::cuda::Counters step = tapegrad::cuda::counters() - before;
//   // step.launches, step.gemms, step.copies, step.host_syncs
#pragma once

#include <atomic>
#include <cstdint>

namespace tapegrad::cuda {

struct Counters {
  uint64_t launches = 0;    // kernel launches (cooperative ones included); copy kernels count here
  uint64_t gemms = 0;       // cuBLAS / cuBLASLt matrix products (a batched product is one)
  uint64_t copies = 0;      // cudaMemcpy*/cudaMemset* calls of any direction
  uint64_t host_syncs = 0;  // waits of the host for the GPU: stream, event and device synchronisations
};

Counters operator-(const Counters& a, const Counters& b);

// A snapshot of the counts since the start of the process or the last reset_counters(). The four
// fields are read one after another, so a snapshot taken while other threads launch is not atomic
// as a whole.
Counters counters();
void reset_counters();

// For the CUDA backend (and its kernels' launch macros): one event each.
namespace detail {
extern std::atomic<uint64_t> g_launches, g_gemms, g_copies, g_host_syncs;
}  // namespace detail
inline void note_launch() {
  detail::g_launches.fetch_add(1, std::memory_order_relaxed);
}
inline void note_gemm() {
  detail::g_gemms.fetch_add(1, std::memory_order_relaxed);
}
inline void note_copy() {
  detail::g_copies.fetch_add(1, std::memory_order_relaxed);
}
inline void note_host_sync() {
  detail::g_host_syncs.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tapegrad::cuda
