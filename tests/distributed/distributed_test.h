// Shared by the tests that run under mpirun: the job's process group and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tapegrad/distributed/process_group.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

// The process group of the whole job, made by main() (timeout: 30 s, so a hang fails a test well
// within ctest's limit).
distributed::ProcessGroup& world();
std::shared_ptr<distributed::ProcessGroup> world_ptr();

inline std::vector<double> values(const Tensor& t) { return t.to(kFloat64).tolist<double>(); }

// Runs `body`, expecting a tapegrad::Error whose message contains every one of `fragments`.
template <class F>
void expect_error(F&& body, const std::vector<std::string>& fragments) {
  try {
    body();
    ADD_FAILURE() << "expected a tapegrad::Error";
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(message.find(f), std::string::npos) << "message '" << message << "' lacks '" << f << "'";
  }
}

}  // namespace tapegrad::testing
