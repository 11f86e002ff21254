// Deadlines from a process group's timeout, where milliseconds::max() means "never": the sum
// saturates instead of overflowing (an overflowed deadline lies in the past, and every wait failed
// at once with a false timeout).
#pragma once

#include <chrono>
#include <string>

namespace tapegrad::distributed::detail {

constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();

inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                            std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  // The time left before the clock's end, in whole milliseconds (rounded down, so no overflow).
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  if (timeout >= left) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(timeout);
}

inline std::string timeout_str(std::chrono::milliseconds timeout) {
  return timeout == kNoTimeout ? std::string("no timeout") : std::to_string(timeout.count()) + " ms";
}

}  // namespace tapegrad::distributed::detail
