// A process group that fails to form, then a normal exit: every rank must exit with status 0
// (MPI finalised at exit without crashing on what the failed formation left behind). Run by ctest
// under mpirun (tests/distributed/CMakeLists.txt), one scenario per test:
//   stagger   the job's group forms; then every rank makes four more groups with a 1 ms timeout,
//             rank r arriving 100 * r ms late each time, so each gives up with its formation pending
//   bad_env   rank 1 has an unparsable TAPEGRAD_DISTRIBUTED_TIMEOUT, so it never joins; the
//             others give up after 1 s
//   never     TAPEGRAD_DISTRIBUTED_TIMEOUT=inf and a timeout of milliseconds::max(): the groups form
// Each rank prints what happened; mpirun fails when a rank dies of a signal or exits non-zero.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tapegrad/distributed/process_group.h"

namespace dist = tapegrad::distributed;

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  int rank = -1;
  try {
    if (scenario == "stagger") {
      rank = dist::init_process_group(options)->rank();
      options.timeout = std::chrono::milliseconds(1);
      for (int attempt = 0; attempt < 4; ++attempt) {
        dist::init_process_group()->barrier();
        try {
          dist::ProcessGroup second(options);
          std::printf("rank %d: attempt %d formed a group\n", rank, attempt);
        } catch (const std::exception& e) {
          std::printf("rank %d: attempt %d failed: %s\n", rank, attempt, e.what());
        }
      }
    } else if (scenario == "bad_env") {
      const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (env_rank == nullptr) env_rank = std::getenv("PMI_RANK");
      rank = env_rank ? std::atoi(env_rank) : 0;
      if (rank == 1) setenv("TAPEGRAD_DISTRIBUTED_TIMEOUT", "soon", 1);
      options.timeout = rank == 1 ? std::chrono::milliseconds(0) : std::chrono::milliseconds(1000);
      dist::init_process_group(options);
      std::printf("rank %d: the group formed\n", rank);
    } else if (scenario == "never") {
      // "No timeout", from the environment and from the API: both groups form (they failed at
      // once with an overflowed deadline).
      setenv("TAPEGRAD_DISTRIBUTED_TIMEOUT", "inf", 1);
      rank = dist::init_process_group()->rank();
      options.timeout = std::chrono::milliseconds::max();
      dist::ProcessGroup second(options);
      second.barrier();
      std::printf("rank %d: both groups formed\n", rank);
    } else {
      std::fprintf(stderr, "usage: %s stagger|bad_env|never\n", argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: formation failed: %s\n", rank, e.what());
    if (scenario == "never") return 1;
  }
  std::printf("rank %d: returning from main\n", rank);
  std::fflush(stdout);
  return 0;  // the default group (if any) is destroyed and MPI finalised at exit
}
