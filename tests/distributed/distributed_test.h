// Shared by the tests that run under mpirun: the job's process group and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/test_util.h"  // values, expect_close, expect_error
#include "tapegrad/distributed/process_group.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

// The process group of the whole job, made by main() (timeout: 30 s, so a hang fails a test well
// within ctest's limit).
distributed::ProcessGroup& world();
std::shared_ptr<distributed::ProcessGroup> world_ptr();

}  // namespace tapegrad::testing
