// main() of the tests run under mpirun: every rank runs the same GoogleTest cases, in the same
// order, sharing one process group. A rank whose test fails exits non-zero, and mpirun (so the
// ctest test) fails with it.
#include "distributed_test.h"

namespace tapegrad::testing {
namespace {
std::shared_ptr<distributed::ProcessGroup> g_world;
}
distributed::ProcessGroup& world() {
  return *g_world;
}
std::shared_ptr<distributed::ProcessGroup> world_ptr() {
  return g_world;
}
}  // namespace tapegrad::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tapegrad::distributed::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  tapegrad::testing::g_world = tapegrad::distributed::init_process_group(options);
  int rc = RUN_ALL_TESTS();
  tapegrad::testing::g_world.reset();
  tapegrad::distributed::destroy_process_group();
  return rc;
}
