// The library's thread count for one scope: set on entry (or left as it is), restored on exit,
// also when an assertion returns early. The one save-and-restore of set_num_threads in the tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>

#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

class ThreadCount {
 public:
  // Only restores: for a test that sets several counts in turn (with set()).
  ThreadCount() : saved_(get_num_threads()) {}
  explicit ThreadCount(int threads) : ThreadCount() { set_num_threads(threads); }
  ~ThreadCount() { set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

  void set(int threads) { set_num_threads(threads); }

 private:
  int saved_;
};

// At least `threads`: forces the OpenMP paths on even where the machine reports one core.
inline int at_least_threads(int threads) {
  return std::max(threads, get_num_threads());
}

// A fixture whose tests may change the thread count: it is restored after each.
class RestoresThreadCount : public ::testing::Test {
 private:
  ThreadCount restore_;
};

}  // namespace tapegrad::testing
