// What a Work handle points at: a collective's completion, error, outputs and timestamps. The
// backend that runs the collective completes or fails it; wait() blocks on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::distributed::detail {

struct WorkState {
  using Clock = std::chrono::steady_clock;
  explicit WorkState(std::string collective) : name(std::move(collective)) {}

  void mark_started();
  void complete(std::vector<Tensor> result);
  void fail(std::exception_ptr error);
  // Blocks until complete() or fail(), then for GPU work until the device has finished too;
  // rethrows the error.
  void wait();
  bool is_completed();

  const std::string name;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::vector<Tensor> outputs;
  Clock::time_point started{}, finished{};
  // GPU work (NCCL): the host part is complete once the kernels are queued; these ask whether the
  // device has finished (never blocks) and wait for it (throws on timeout). Empty for MPI work.
  std::function<bool()> device_query;
  std::function<void()> device_wait;
  // Counts the callers blocked in wait() on the backend's work, so that the backend's worker tests
  // its requests without pausing while one is (that caller's core is idle anyway). May be null.
  std::shared_ptr<std::atomic<int>> waiters;
};

}  // namespace tapegrad::distributed::detail
