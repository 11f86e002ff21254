// NCCL entry points of a build without NCCL: CUDA tensors cannot be communicated.
#include "distributed/nccl_comm.h"

namespace tapegrad::distributed {

bool is_nccl_available() {
  return false;
}

namespace detail {
std::unique_ptr<NcclComm> make_nccl_comm(int, int, int, const std::function<void(std::vector<char>&)>&,
                                         std::chrono::milliseconds) {
  ::tapegrad::detail::throw_error(
      "ProcessGroup: collectives on CUDA tensors need NCCL, and this build of tapegrad has none (configured "
      "without CUDA, without MPI, or NCCL was not found beside the CUDA toolkit: set NCCL_ROOT)");
}
}  // namespace detail

}  // namespace tapegrad::distributed
