// ProcessGroup in a build without MPI (TAPEGRAD_DISTRIBUTED=OFF or no MPI found): creating one is
// a clear error, so nothing else here can be reached.
#include "tapegrad/distributed/process_group.h"

namespace tapegrad::distributed {

bool is_available() {
  return false;
}

struct ProcessGroup::Impl {};

ProcessGroup::ProcessGroup(ProcessGroupOptions) {
  ::tapegrad::detail::throw_error(
      "ProcessGroup: this build of tapegrad has no multi-process support (configured with TAPEGRAD_DISTRIBUTED=OFF, "
      "or no MPI was found: on Debian, apt-get install libopenmpi-dev openmpi-bin and reconfigure)");
}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const {
  return 0;
}
int ProcessGroup::size() const {
  return 1;
}
int ProcessGroup::local_rank() const {
  return 0;
}
int ProcessGroup::local_size() const {
  return 1;
}
std::chrono::milliseconds ProcessGroup::timeout() const {
  return {};
}
Work ProcessGroup::all_reduce_async(const Tensor&, ReduceOp) {
  return {};
}
Work ProcessGroup::broadcast_async(const Tensor&, int) {
  return {};
}
Work ProcessGroup::all_gather_async(const Tensor&) {
  return {};
}
Work ProcessGroup::reduce_scatter_async(const Tensor&, const std::vector<Tensor>&, ReduceOp) {
  return {};
}
Work ProcessGroup::barrier_async() {
  return {};
}
void ProcessGroup::all_reduce(const Tensor&, ReduceOp) {}
void ProcessGroup::broadcast(const Tensor&, int) {}
std::vector<Tensor> ProcessGroup::all_gather(const Tensor&) {
  return {};
}
void ProcessGroup::reduce_scatter(const Tensor&, const std::vector<Tensor>&, ReduceOp) {}
void ProcessGroup::barrier() {}
Work ProcessGroup::isend(const Tensor&, int, int) {
  return {};
}
Work ProcessGroup::irecv(const Tensor&, int, int) {
  return {};
}
void ProcessGroup::send(const Tensor&, int, int) {}
void ProcessGroup::recv(const Tensor&, int, int) {}
int ProcessGroup::max_tag() const {
  return 0;
}
void ProcessGroup::abort(const std::string&) {}
Work detail::isend_unchecked(ProcessGroup&, const Tensor&, int, int) {
  return {};
}
Work detail::irecv_unchecked(ProcessGroup&, const Tensor&, int, int) {
  return {};
}

}  // namespace tapegrad::distributed
