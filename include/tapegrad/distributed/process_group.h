// ProcessGroup: the processes of a data-parallel job and the collectives between them, as in
// torch.distributed. Processes are started by an MPI launcher (mpirun, srun, ...); rank and size
// come from MPI. CPU tensors travel over MPI, CUDA tensors over NCCL on the tensor's current stream
// (one communicator per device, its unique id broadcast over MPI). See docs/distributed.md.
//
//   auto group = distributed::init_process_group();         // once per process
//   Tensor t = ones({4}) * double(group->rank());
//   group->all_reduce(t, distributed::ReduceOp::Sum);       // t = 0 + 1 + ... + (size - 1)
//   distributed::Work work = group->all_reduce_async(t);    // ... overlap other work ...
//   work.wait();                                            // rethrows the collective's error
//
// Every rank must call the same collectives in the same order. Before each collective the ranks
// compare what they were asked to do (the collective, dtype, shape, reduce op, root), so a mismatch
// is a tapegrad::Error on every rank, naming the collective and the ranks that differ, instead of a
// hang or wrong data. A collective that does not finish within the timeout (a rank died, hangs, or
// called something else) fails with an Error naming it; after that the group is unusable.
//
// Tensors must be contiguous, on the CPU or a CUDA device, and the same on every rank (dtype,
// shape, device kind). An async collective keeps its tensors alive; do not read or write them until
// wait() returns. Zero-element tensors are allowed. A build without MPI has this API, and
// init_process_group() throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::distributed {

// Sum of bools is a logical or (as in PyTorch); Avg needs a floating-point tensor.
enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", ...

class ProcessGroup;
class Work;
namespace detail {
struct WorkState;
// Point to point without the dtype/shape exchange, for protocols whose two sides already agree on
// both (Pipeline's messages carry their own headers): the payload is posted at once under an MPI
// tag of its own, so a small send completes without waiting for its recv. Not for users: a
// mismatch here is undefined (MPI truncates or hangs) instead of an Error.
Work isend_unchecked(ProcessGroup& group, const Tensor& tensor, int dst, int tag);
Work irecv_unchecked(ProcessGroup& group, const Tensor& tensor, int src, int tag);
}  // namespace detail

// A collective in flight (torch.distributed's Work). Copies refer to the same collective.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  // Blocks until the collective finished; rethrows its tapegrad::Error (mismatch, timeout). For
  // CUDA tensors it returns once the NCCL kernel has finished on the GPU.
  void wait() const;
  bool is_completed() const;  // never blocks
  // wait(), then the result: the reduced or broadcast tensor, the gathered tensors (one per rank),
  // or the reduce_scatter output.
  std::vector<Tensor> result() const;
  // The collective's name, e.g. "all_reduce".
  const std::string& name() const;
  // When the backend began communicating (set once it has), and when it finished; for tests that
  // check communication overlaps computation, and for profiling.
  using TimePoint = std::chrono::steady_clock::time_point;
  TimePoint start_time() const;
  TimePoint end_time() const;
  bool defined() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

struct ProcessGroupOptions {
  // How long one collective may take before it fails. Zero: the TAPEGRAD_DISTRIBUTED_TIMEOUT
  // environment variable (seconds) if set, else 30 minutes (PyTorch's default).
  std::chrono::milliseconds timeout{0};
  // Compare every collective's arguments across ranks first (one small MPI exchange each). Off,
  // a mismatch is undefined behaviour of MPI/NCCL (a hang until the timeout, or garbage).
  bool check_collectives = true;
};

class ProcessGroup {
 public:
  // The whole job (MPI_COMM_WORLD, duplicated so that tapegrad's messages never mix with the
  // caller's). Initialises MPI (thread level MPI_THREAD_SERIALIZED) unless the program already did,
  // and finalises it at exit if it did. Throws without MPI support, or when MPI was initialised with
  // a thread level below MPI_THREAD_SERIALIZED.
  explicit ProcessGroup(ProcessGroupOptions options = {});
  // Waits for queued collectives to finish (those of a timed-out group are abandoned).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  // Rank among the processes on this machine (to pick a GPU: local_rank() % cuda::device_count()).
  int local_rank() const;
  int local_size() const;
  std::chrono::milliseconds timeout() const;

  // In place: every rank's `tensor` becomes the reduction of all ranks' tensors.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // In place: every rank's `tensor` becomes rank `root`'s.
  void broadcast(const Tensor& tensor, int root = 0);
  Work broadcast_async(const Tensor& tensor, int root = 0);
  // Every rank's `input`, in rank order. Sizes along dim 0 may differ between ranks (the other
  // dims and the dtype may not); the result is new tensors on input's device.
  std::vector<Tensor> all_gather(const Tensor& input);
  Work all_gather_async(const Tensor& input);  // result(): the gathered tensors
  // inputs[r] (one per rank) from every rank are reduced into `output` on rank r, which must have
  // inputs[rank()]'s shape. Pieces may differ in size between r, the same on every rank.
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_async(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::Sum);
  // Returns once every rank has called it.
  void barrier();
  Work barrier_async();

  // Point to point (torch.distributed.send/recv/isend/irecv): `tensor` goes to rank `dst`, whose
  // recv(tensor, src, tag) with this rank as `src` and the same tag fills its preallocated tensor.
  // Only the two ranks take part; sends and recvs with the same peer and tag pair up in the order
  // they were called, those with different tags or peers independently. Before any data moves the
  // two sides compare dtype and shape, so a mismatch is a tapegrad::Error on both, naming send,
  // recv, both ranks and what differs (that pair is used up; the group stays usable). A send does
  // not complete before its recv was called (a rendezvous: a ring of blocking sends deadlocks, as
  // in torch; alternate the order by rank, or use isend/irecv).
  // A side whose peer does not answer within the timeout (no matching call, another tag, a failed
  // rank) fails with an Error naming the op and the peer; after that the group is unusable. p2p
  // never blocks the collectives: they run, in order, while p2p operations are in flight.
  // Sending to oneself, a rank outside the group, a negative tag (or one above max_tag()) or a
  // non-contiguous tensor is an Error up front.
  // CUDA tensors travel over NCCL (ncclSend/ncclRecv on the tensor's current stream; the Work
  // waits for the stream). The two sides first swap dtype and shape over MPI, so isend/irecv of a
  // CUDA tensor return only once the peer has made its matching call and the transfer is queued;
  // CUDA pairs between two ranks must therefore be called in the same order on both. The first one
  // on a device makes the pair's NCCL communicator (both ranks block in it until both are there).
  // Never run on GPUs so far.
  void send(const Tensor& tensor, int dst, int tag = 0);
  void recv(const Tensor& tensor, int src, int tag = 0);
  Work isend(const Tensor& tensor, int dst, int tag = 0);  // keeps `tensor` alive until done
  Work irecv(const Tensor& tensor, int src, int tag = 0);  // result(): `tensor`, filled
  // The largest tag this MPI allows (at least 8190).
  int max_tag() const;

  // Makes the group unusable at once: every send and recv in flight fails (their buffers stay with
  // MPI until the process exits) and so does every later call, with an Error that holds `reason`;
  // the destructor then waits for nothing. For a job that must stop after a rank failed, when its
  // peers cannot know which of its messages will never be answered (Pipeline does this).
  void abort(const std::string& reason);

  struct Impl;

 private:
  friend Work detail::isend_unchecked(ProcessGroup&, const Tensor&, int, int);
  friend Work detail::irecv_unchecked(ProcessGroup&, const Tensor&, int, int);
  std::unique_ptr<Impl> impl_;
};

// The default group, made on first call (torch.distributed.init_process_group); `options` count
// only then. destroy_process_group() drops it (call before main returns if you hold no other copy).
std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options = {});
void destroy_process_group();
// Whether this build can talk to other processes (MPI) and communicate CUDA tensors (NCCL).
bool is_available();
bool is_nccl_available();

}  // namespace tapegrad::distributed
