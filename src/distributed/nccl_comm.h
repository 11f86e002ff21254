// The NCCL side of a ProcessGroup: one communicator per CUDA device, running collectives on the
// tensor's current stream. Implemented in cuda/distributed/ (a CUDA build with NCCL); elsewhere
// make_nccl_comm throws. The ProcessGroup has already checked the arguments (and compared them
// across ranks) before calling these.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "distributed/work_state.h"
#include "tapegrad/distributed/process_group.h"

namespace tapegrad::distributed::detail {

class NcclComm {
 public:
  virtual ~NcclComm() = default;
  // Each returns once the kernels are queued on the current stream of the tensors' device; the
  // work's device_wait blocks until they finish (or the timeout, which aborts the communicator).
  virtual std::shared_ptr<WorkState> all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<WorkState> broadcast(const Tensor& tensor, int root) = 0;
  // outputs[r] receives rank r's input (allocated by the caller with rank r's shape).
  virtual std::shared_ptr<WorkState> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) = 0;
  virtual std::shared_ptr<WorkState> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                    ReduceOp op) = 0;
  // Point to point with `peer` (a rank of this communicator): ncclSend / ncclRecv on the current
  // stream. The caller has already paired the two calls and compared dtype and shape.
  virtual std::shared_ptr<WorkState> send(const Tensor& tensor, int peer) = 0;
  virtual std::shared_ptr<WorkState> recv(const Tensor& tensor, int peer) = 0;
};

// Joins the communicator of `device` (every rank calls this for its device at the same point).
// `broadcast_id` replaces its argument by rank 0's bytes (over MPI): the NCCL unique id.
std::unique_ptr<NcclComm> make_nccl_comm(int device, int rank, int size,
                                         const std::function<void(std::vector<char>&)>& broadcast_id,
                                         std::chrono::milliseconds timeout);

}  // namespace tapegrad::distributed::detail
