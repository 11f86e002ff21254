// A barrier for a team that meets once per step of a loop, cheaper than an OpenMP barrier at the
// microsecond scale of an LSTM step at batch 1 (Note [batch-1 recurrence split by hidden units],
// kernels/lstm.cpp): each thread publishes how many steps it has finished on a cache line of its
// own, then waits until every other thread has finished as many. Nobody resets anything between
// steps, so there is no phase to get wrong. The wait itself serves a thread that follows another's
// progress (Note [weight gradients beside the batch-1 recurrence]).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tapegrad::cpu {

// Returns once `done` (published with release order) reaches `step`: writes made before it was
// published are then visible. Spins first: the other thread is usually a fraction of a microsecond
// away. After about 20 us of pause instructions (22 ns each on a Zen 5) it has probably lost its core
// (a busy machine), so this one gives its own up instead of burning it.
inline void wait_until_reached(const std::atomic<int64_t>& done, int64_t step) {
  constexpr int kSpinsBeforeYield = 1024;
  for (int spins = 0; done.load(std::memory_order_acquire) < step; ++spins) {
    if (spins < kSpinsBeforeYield) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      sched_yield();
    }
  }
}

class StepBarrier {
 public:
  explicit StepBarrier(int team) : slots_(static_cast<size_t>(team)) {}

  // Thread `part` of the first `parts` slots has finished step `step` (1, 2, ...); returns once
  // all of them have. Writes made before the call are visible to every thread after it.
  void arrive_and_wait(int part, int parts, int64_t step) {
    slots_[static_cast<size_t>(part)].done.store(step, std::memory_order_release);
    for (int other = 0; other < parts; ++other) wait_until_reached(slots_[static_cast<size_t>(other)].done, step);
  }

 private:
  struct alignas(64) Slot {
    std::atomic<int64_t> done{0};
  };
  std::vector<Slot> slots_;
};

}  // namespace tapegrad::cpu
