// NCCL communicators for ProcessGroup: one per CUDA device, created from a unique id that rank 0
// makes and MPI broadcasts. Each collective is queued on the current stream of the tensors' device;
// its Work waits for an event recorded after it, polling so that a collective that does not finish
// within the timeout aborts the communicator and becomes an Error naming it (as PyTorch's NCCL
// watchdog does), instead of a hang.
#include "distributed/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>

#include "distributed/deadline.h"
#include "runtime/cuda_check.h"
#include "tapegrad/cuda/device.h"
#include "tapegrad/cuda/memory.h"
#include "tapegrad/cuda/stream.h"

namespace tapegrad::distributed {

bool is_nccl_available() {
  return true;
}

namespace detail {

namespace {

using ::tapegrad::detail::str_cat;
using ::tapegrad::detail::throw_error;
using Clock = std::chrono::steady_clock;

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  throw_error(str_cat("ProcessGroup: ", what, " failed: ", ncclGetErrorString(rc)));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Bool:
      return ncclUint8;
  }
  throw_error(str_cat("ProcessGroup: no NCCL type for ", dtype_name(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op, DType dtype) {
  if (dtype == DType::Bool) return op == ReduceOp::Min ? ncclMin : ncclMax;  // 0/1 bytes: max is or
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

class Nccl : public NcclComm {
 public:
  Nccl(int device, int rank, int size, const ncclUniqueId& id, std::chrono::milliseconds timeout)
      : device_(device), rank_(rank), size_(size), timeout_(timeout) {
    cuda::DeviceGuard guard(device);
    check_nccl(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
  }
  ~Nccl() override {
    cuda::DeviceGuard guard(device_);
    if (aborted_) return;
    ncclCommDestroy(comm_);  // after its queued work (destructors do not throw)
  }

  std::shared_ptr<WorkState> all_reduce(const Tensor& t, ReduceOp op) override {
    return run("all_reduce", {t}, {t}, [&](cudaStream_t s) {
      check_nccl(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()),
                               nccl_op(op, t.dtype()), comm_, s),
                 "ncclAllReduce");
    });
  }

  std::shared_ptr<WorkState> broadcast(const Tensor& t, int root) override {
    return run("broadcast", {t}, {t}, [&](cudaStream_t s) {
      check_nccl(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_, s),
                 "ncclBroadcast");
    });
  }

  std::shared_ptr<WorkState> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override {
    std::vector<Tensor> used = outputs;
    used.push_back(input);
    return run("all_gather", used, outputs, [&](cudaStream_t s) {
      // One broadcast per rank in a group: the ranks' inputs may differ in size.
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < size_; ++r) {
        const Tensor& out = outputs[size_t(r)];
        const void* send = r == rank_ ? input.data_ptr() : out.data_ptr();
        check_nccl(ncclBroadcast(send, out.data_ptr(), size_t(out.numel()), nccl_type(out.dtype()), r, comm_, s),
                   "ncclBroadcast");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  std::shared_ptr<WorkState> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                            ReduceOp op) override {
    std::vector<Tensor> used = inputs;
    used.push_back(output);
    return run("reduce_scatter", used, {output}, [&](cudaStream_t s) {
      // One reduce per rank (rooted at it) in a group: the pieces may differ in size.
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < size_; ++r) {
        const Tensor& piece = inputs[size_t(r)];
        check_nccl(ncclReduce(piece.data_ptr(), r == rank_ ? output.data_ptr() : nullptr, size_t(piece.numel()),
                              nccl_type(piece.dtype()), nccl_op(op, piece.dtype()), r, comm_, s),
                   "ncclReduce");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  std::shared_ptr<WorkState> send(const Tensor& t, int peer) override {
    return run("send", {t}, {t}, [&](cudaStream_t s) {
      if (t.numel() > 0)
        check_nccl(ncclSend(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), peer, comm_, s), "ncclSend");
    });
  }

  std::shared_ptr<WorkState> recv(const Tensor& t, int peer) override {
    return run("recv", {t}, {t}, [&](cudaStream_t s) {
      if (t.numel() > 0)
        check_nccl(ncclRecv(t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), peer, comm_, s), "ncclRecv");
    });
  }

 private:
  template <class Enqueue>
  std::shared_ptr<WorkState> run(const char* name, const std::vector<Tensor>& used, std::vector<Tensor> result,
                                 Enqueue enqueue) {
    TG_CHECK(!aborted_, "ProcessGroup: ", name, ": the NCCL communicator of cuda:", device_,
             " was aborted after an earlier collective timed out");
    cuda::DeviceGuard guard(device_);
    cuda::Stream stream = cuda::current_stream(device_);
    cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
    auto work = std::make_shared<WorkState>(name);
    work->mark_started();
    enqueue(s);
    // The caching allocator must not hand these blocks to another stream before NCCL is done.
    for (const Tensor& t : used)
      if (t.numel() > 0) cuda::record_stream(t, stream);
    auto event = std::make_shared<cudaEvent_t>();
    TG_CUDA_CHECK(cudaEventCreateWithFlags(event.get(), cudaEventDisableTiming), "ProcessGroup (NCCL)");
    TG_CUDA_CHECK(cudaEventRecord(*event, s), "ProcessGroup (NCCL)");
    std::shared_ptr<cudaEvent_t> owner(event.get(), [event](cudaEvent_t* e) { cudaEventDestroy(*e); });
    int device = device_;
    work->device_query = [owner, device] {
      cuda::DeviceGuard g(device);
      return cudaEventQuery(*owner) == cudaSuccess;
    };
    std::string what = str_cat(name, " on cuda:", device_);
    // Works must be waited for before their group is destroyed (the communicator goes with it).
    work->device_wait = [this, owner, device, what] {
      cuda::DeviceGuard g(device);
      const Clock::time_point deadline = deadline_after(Clock::now(), timeout_);
      for (;;) {
        cudaError_t status = cudaEventQuery(*owner);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) TG_CUDA_CHECK(status, "ProcessGroup (NCCL)");
        ncclResult_t async = ncclSuccess;
        check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
        check_nccl(async, what.c_str());
        if (Clock::now() >= deadline) {
          aborted_ = true;
          ncclCommAbort(comm_);
          throw_error(str_cat("ProcessGroup: ", what, " did not finish within ", timeout_.count(), " ms on rank ",
                              rank_, " of ", size_, ": another rank may have failed, be stuck, or be calling a ",
                              "different collective; the NCCL communicator was aborted"));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    };
    work->complete(std::move(result));
    return work;
  }

  int device_, rank_, size_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<NcclComm> make_nccl_comm(int device, int rank, int size,
                                         const std::function<void(std::vector<char>&)>& broadcast_id,
                                         std::chrono::milliseconds timeout) {
  ncclUniqueId id{};
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<char> bytes(reinterpret_cast<const char*>(&id), reinterpret_cast<const char*>(&id) + sizeof(id));
  broadcast_id(bytes);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(&id));
  return std::make_unique<Nccl>(device, rank, size, id, timeout);
}

}  // namespace detail
}  // namespace tapegrad::distributed
