// parallel_for over an index range on the shared OpenMP pool, with a grain size so that small
// tensors run on the calling thread and do not pay for waking threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "tapegrad/runtime.h"

namespace tapegrad::cpu {

// Elements below which a loop stays serial (cheap pointwise ops; vectorised float exp, tanh and
// sigmoid count as cheap). Starting a parallel region costs microseconds on an idle machine and can
// cost milliseconds when another process holds the other core, so a thread's share must be worth
// tens of microseconds: 65536 floats is ~10-20 us of a memory-bound pass, and keeps per-step tensors
// of small models (an LSTM step's [B, 4H], gradients of weights up to 256 KiB) on the calling thread.
constexpr int64_t kGrainSize = 65536;

// Calls f(begin, end) on disjoint chunks covering [begin, end). The chunking depends only on the
// range, the grain and the thread count; no exception may escape f.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int threads = get_num_threads();
  if (n <= grain || threads <= 1 || omp_in_parallel()) {
    f(begin, end);
    return;
  }
  int64_t max_chunks = (n + grain - 1) / grain;
  int use = static_cast<int>(std::min<int64_t>(threads, max_chunks));
#pragma omp parallel num_threads(use)
  {
    int64_t team = omp_get_num_threads();
    int64_t chunk = (n + team - 1) / team;
    int64_t lo = begin + omp_get_thread_num() * chunk;
    int64_t hi = std::min(end, lo + chunk);
    if (lo < hi) f(lo, hi);
  }
}

}  // namespace tapegrad::cpu
