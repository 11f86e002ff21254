// ProcessGroup over MPI: argument checks, then CPU tensors go to the group's MPI worker queue and
// CUDA tensors to the device's NCCL communicator (after the same cross-rank comparison, over MPI).
#include <mpi.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>

#include "distributed/collective_check.h"
#include "distributed/deadline.h"
#include "distributed/mpi/mpi_queue.h"
#include "distributed/mpi/mpi_runtime.h"
#include "distributed/nccl_comm.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/core/half.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/join.h"

namespace tapegrad::distributed {

using detail::Collective;
using detail::CollectiveDesc;
using detail::MpiJob;
using detail::WorkState;
using ::tapegrad::detail::str_cat;
using Clock = std::chrono::steady_clock;

bool is_available() {
  return true;
}

namespace {

// ProcessGroupOptions::timeout, else TAPEGRAD_DISTRIBUTED_TIMEOUT (seconds), else 30 minutes.
// "Never" (milliseconds::max(), or inf or any number of seconds past what milliseconds can hold)
// saturates to kNoTimeout; a positive timeout below 1 ms is 1 ms.
std::chrono::milliseconds resolve_timeout(std::chrono::milliseconds given) {
  TG_CHECK(given.count() >= 0, "ProcessGroup: ProcessGroupOptions::timeout must be positive (or zero for the ",
           "default), got ", given.count(), " ms");
  if (given.count() > 0) return given;
  if (const char* env = std::getenv("TAPEGRAD_DISTRIBUTED_TIMEOUT")) {
    char* end = nullptr;
    double seconds = std::strtod(env, &end);
    TG_CHECK(end != env && *end == '\0' && seconds > 0, "ProcessGroup: TAPEGRAD_DISTRIBUTED_TIMEOUT must be a ",
             "positive number of seconds (or inf for no timeout), got '", env, "'");
    double ms = std::ceil(seconds * 1000.0);
    if (!(ms < double(detail::kNoTimeout.count()))) return detail::kNoTimeout;  // inf, or too large to hold
    return std::chrono::milliseconds(int64_t(ms));
  }
  return std::chrono::minutes(30);
}

// Polls one request from the caller's thread (group creation), taking the MPI lock per test.
void wait_request(MPI_Request& request, Clock::time_point deadline, const char* what) {
  for (;;) {
    int done = 0;
    {
      std::lock_guard<std::mutex> lock(detail::mpi_mutex());
      detail::check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    }
    if (done) return;
    TG_CHECK(Clock::now() < deadline, "ProcessGroup: ", what, " did not finish within the timeout: not every rank ",
             "is creating the process group");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void check_tensor(const char* op, const Tensor& t, const char* role = "tensor") {
  TG_CHECK(t.defined(), "ProcessGroup: ", op, ": the ", role, " is undefined");
  TG_CHECK(t.is_contiguous(), "ProcessGroup: ", op, ": the ", role, " (", shape_str(t.sizes()), " with strides ",
           shape_str(t.strides()), ") must be contiguous; pass .contiguous() and copy the result back");
  TG_CHECK(t.numel() <= INT_MAX, "ProcessGroup: ", op, ": the ", role, " has ", t.numel(),
           " elements, more than one collective can move (", INT_MAX, "); split it");
}

void check_op(const char* name, ReduceOp op, DType dtype) {
  TG_CHECK(op != ReduceOp::Avg || is_floating_point(dtype), "ProcessGroup: ", name,
           ": ReduceOp::Avg needs a floating-point tensor, got ", dtype_name(dtype), "; use Sum and divide");
}

std::string what_of(const char* name, const Tensor& t, const std::string& extra = "") {
  return str_cat(name, " (", dtype_name(t.dtype()), " ", shape_str(t.sizes()), extra.empty() ? "" : ", ", extra, ")");
}

// avg = sum / size, in place, on the worker (no autograd: the tensor may be a parameter).
void divide_in_place(const Tensor& t, int size) {
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::Float32: {
      float* p = static_cast<float*>(t.data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] /= float(size);
      break;
    }
    case DType::Float64: {
      double* p = static_cast<double*>(t.data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] /= double(size);
      break;
    }
    case DType::Float16: {
      Half* p = static_cast<Half*>(t.data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] = Half(float(p[i]) / float(size));
      break;
    }
    case DType::BFloat16: {
      BFloat16* p = static_cast<BFloat16*>(t.data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] = BFloat16(float(p[i]) / float(size));
      break;
    }
    default:
      TG_ASSERT(false, "avg of ", dtype_name(t.dtype()));
  }
}

// MPI wants a valid address even for zero elements.
void* address(const Tensor& t) {
  static char empty[16];
  return t.numel() == 0 ? empty : t.data_ptr();
}

struct Formation {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  std::vector<char> names;
};

}  // namespace

struct ProcessGroup::Impl {
  std::chrono::milliseconds timeout{};
  bool check = true;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int max_tag = 0;  // MPI_TAG_UB / 4 - 1: each p2p tag uses four MPI tags (mpi_queue.h)
  std::unique_ptr<detail::MpiQueue> queue;
  std::mutex nccl_mutex;
  std::map<int, std::unique_ptr<detail::NcclComm>> nccl;  // by device index
  // Point to point on CUDA tensors: a communicator of two ranks per (device, peer), made by the
  // pair at its first CUDA send/recv on that device (the collectives' one needs every rank).
  std::map<std::pair<int, int>, std::unique_ptr<detail::NcclComm>> nccl_pairs;

  std::shared_ptr<WorkState> submit(const char* name, CollectiveDesc desc, std::string what, bool exchange,
                                    MpiJob job) {
    job.work = std::make_shared<WorkState>(name);
    job.work->waiters = queue->waiters();
    job.desc = desc;
    job.what = std::move(what);
    job.exchange_descs = exchange;
    std::shared_ptr<WorkState> work = job.work;
    queue->submit(std::move(job));
    return work;
  }

  // The cross-rank comparison alone, waited for (before a CUDA collective); every rank's description.
  std::vector<CollectiveDesc> compare(const char* name, const CollectiveDesc& desc, const std::string& what,
                                      bool needed) {
    if (!check && !needed) return {};
    auto ranks = std::make_shared<std::vector<CollectiveDesc>>();
    MpiJob job;
    job.post = [](const std::vector<CollectiveDesc>&, std::vector<MPI_Request>&) {};
    job.finish = [ranks](const std::vector<CollectiveDesc>& all) {
      *ranks = all;
      return std::vector<Tensor>{};
    };
    std::shared_ptr<WorkState> work = submit(name, desc, what, true, std::move(job));
    work->wait();
    return *ranks;
  }

  detail::NcclComm& nccl_for(int device) {
    std::lock_guard<std::mutex> lock(nccl_mutex);
    auto found = nccl.find(device);
    if (found != nccl.end()) return *found->second;
    auto broadcast_id = [this](std::vector<char>& bytes) {
      MpiJob job;
      auto buffer = std::make_shared<std::vector<char>>(bytes);
      job.keep_alive.push_back(buffer);
      MPI_Comm c = comm;
      job.post = [buffer, c](const std::vector<CollectiveDesc>&, std::vector<MPI_Request>& requests) {
        requests.resize(1);
        detail::check_mpi(MPI_Ibcast(buffer->data(), int(buffer->size()), MPI_BYTE, 0, c, &requests[0]), "MPI_Ibcast");
      };
      std::shared_ptr<WorkState> work = submit("NCCL bootstrap", detail::describe(Collective::Bootstrap, Tensor()),
                                               "NCCL bootstrap", true, std::move(job));
      work->wait();
      bytes = *buffer;
    };
    auto made = detail::make_nccl_comm(device, rank, size, broadcast_id, timeout);
    return *nccl.emplace(device, std::move(made)).first->second;
  }

  // The pair's communicator (this rank and `peer` on `device`), made on first use: the lower rank
  // makes the unique id and sends it to the other over MPI (tag `tag`, right after the pair's
  // handshake, so both sides are here and call this in the same order). Rank 0 of the pair is the
  // lower global rank.
  detail::NcclComm& nccl_pair(ProcessGroup& group, int device, int peer, int tag) {
    std::lock_guard<std::mutex> lock(nccl_mutex);
    const std::pair<int, int> key{device, peer};
    auto found = nccl_pairs.find(key);
    if (found != nccl_pairs.end()) return *found->second;
    const bool lower = rank < peer;
    auto exchange_id = [&](std::vector<char>& bytes) {
      Tensor words = zeros({int64_t((bytes.size() + 7) / 8)}, kInt64);
      if (lower) {
        std::memcpy(words.data_ptr(), bytes.data(), bytes.size());
        group.send(words, peer, tag);
      } else {
        group.recv(words, peer, tag);
        std::memcpy(bytes.data(), words.data_ptr(), bytes.size());
      }
    };
    auto made = detail::make_nccl_comm(device, lower ? 0 : 1, 2, exchange_id, timeout);
    return *nccl_pairs.emplace(key, std::move(made)).first->second;
  }
};

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : impl_(std::make_unique<Impl>()) {
  detail::ensure_mpi_initialized();
  Impl& g = *impl_;
  g.timeout = resolve_timeout(options.timeout);
  g.check = options.check_collectives;
  const Clock::time_point deadline = detail::deadline_after(Clock::now(), g.timeout);
  // The formation's buffers and requests. MPI writes into them when a request completes, which may
  // be after this rank gave up (another rank arrived late), so a failed formation leaves them
  // alive, on purpose, until the process exits.
  auto formation = std::make_unique<Formation>();
  Formation& f = *formation;
  try {
    // First, every rank arrives (a barrier). Only then the communicator is duplicated: MPI_Finalize
    // crashes (in OpenMPI) on a duplication that every rank posted and none completed, which is
    // what a timeout here used to leave behind; a pending barrier is harmless at exit.
    {
      std::lock_guard<std::mutex> lock(detail::mpi_mutex());
      detail::check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &f.request), "MPI_Ibarrier");
    }
    wait_request(f.request, deadline, "MPI_Ibarrier");
    {
      std::lock_guard<std::mutex> lock(detail::mpi_mutex());
      detail::check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &f.comm, &f.request), "MPI_Comm_idup");
    }
    wait_request(f.request, deadline, "MPI_Comm_idup");
    {
      std::lock_guard<std::mutex> lock(detail::mpi_mutex());
      MPI_Comm_set_errhandler(f.comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(f.comm, &g.rank);
      MPI_Comm_size(f.comm, &g.size);
      int* tag_ub = nullptr;
      int has_tag_ub = 0;
      MPI_Comm_get_attr(f.comm, MPI_TAG_UB, &tag_ub, &has_tag_ub);
      g.max_tag = (has_tag_ub && tag_ub ? *tag_ub : 32767) / 4 - 1;
      int length = 0;
      MPI_Get_processor_name(f.name, &length);
      f.names.resize(size_t(g.size) * MPI_MAX_PROCESSOR_NAME);
      detail::check_mpi(MPI_Iallgather(f.name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, f.names.data(), MPI_MAX_PROCESSOR_NAME,
                                       MPI_CHAR, f.comm, &f.request),
                        "MPI_Iallgather");
    }
    wait_request(f.request, deadline, "MPI_Iallgather of the host names");
  } catch (...) {
    if (f.request != MPI_REQUEST_NULL) static_cast<void>(formation.release());  // pending: MPI may write into it
    throw;
  }
  g.comm = f.comm;
  const char* name = f.name;
  const std::vector<char>& names = f.names;
  // Ranks on the same host (same processor name), counted in rank order.
  g.local_rank = g.local_size = 0;
  for (int r = 0; r < g.size; ++r) {
    if (std::strncmp(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME], name, MPI_MAX_PROCESSOR_NAME) != 0) continue;
    if (r < g.rank) ++g.local_rank;
    ++g.local_size;
  }
  g.queue = std::make_unique<detail::MpiQueue>(g.comm, g.rank, g.size, g.timeout);
  detail::group_created();
}

ProcessGroup::~ProcessGroup() {
  Impl& g = *impl_;
  {
    std::lock_guard<std::mutex> lock(g.nccl_mutex);
    g.nccl.clear();
    g.nccl_pairs.clear();
  }
  g.queue->stop();  // runs (or fails) what is queued
  if (!g.queue->broken()) {
    std::lock_guard<std::mutex> lock(detail::mpi_mutex());
    MPI_Comm_free(&g.comm);
  }
  g.queue.reset();
  detail::group_destroyed();
}

int ProcessGroup::rank() const {
  return impl_->rank;
}
int ProcessGroup::size() const {
  return impl_->size;
}
int ProcessGroup::local_rank() const {
  return impl_->local_rank;
}
int ProcessGroup::local_size() const {
  return impl_->local_size;
}
std::chrono::milliseconds ProcessGroup::timeout() const {
  return impl_->timeout;
}

Work ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor);
  check_op("all_reduce", op, tensor.dtype());
  Impl& g = *impl_;
  CollectiveDesc desc = detail::describe(Collective::AllReduce, tensor, op);
  std::string what = what_of("all_reduce", tensor, reduce_op_name(op));
  tensor.storage()->bump_version();
  if (tensor.device().is_cuda()) {
    g.compare("all_reduce", desc, what, false);
    return Work(g.nccl_for(tensor.device().index()).all_reduce(tensor, op));
  }
  MpiJob job;
  MPI_Comm comm = g.comm;
  int size = g.size;
  job.post = [tensor, op, comm](const std::vector<CollectiveDesc>&, std::vector<MPI_Request>& requests) {
    requests.resize(1);
    detail::check_mpi(
        MPI_Iallreduce(MPI_IN_PLACE, address(tensor), int(tensor.numel()), detail::mpi_datatype(tensor.dtype()),
                       detail::mpi_op(op, tensor.dtype()), comm, &requests[0]),
        "MPI_Iallreduce");
  };
  job.finish = [tensor, op, size](const std::vector<CollectiveDesc>&) {
    if (op == ReduceOp::Avg) divide_in_place(tensor, size);
    return std::vector<Tensor>{tensor};
  };
  return Work(g.submit("all_reduce", desc, what, g.check, std::move(job)));
}

Work ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  check_tensor("broadcast", tensor);
  Impl& g = *impl_;
  TG_CHECK(root >= 0 && root < g.size, "ProcessGroup: broadcast: root ", root, " is not a rank of this group of ",
           g.size);
  CollectiveDesc desc = detail::describe(Collective::Broadcast, tensor, ReduceOp::Sum, root);
  std::string what = what_of("broadcast", tensor, str_cat("root ", root));
  tensor.storage()->bump_version();
  if (tensor.device().is_cuda()) {
    g.compare("broadcast", desc, what, false);
    return Work(g.nccl_for(tensor.device().index()).broadcast(tensor, root));
  }
  MpiJob job;
  MPI_Comm comm = g.comm;
  job.post = [tensor, root, comm](const std::vector<CollectiveDesc>&, std::vector<MPI_Request>& requests) {
    requests.resize(1);
    detail::check_mpi(MPI_Ibcast(address(tensor), int(tensor.numel()), detail::mpi_datatype(tensor.dtype()), root, comm,
                                 &requests[0]),
                      "MPI_Ibcast");
  };
  job.finish = [tensor](const std::vector<CollectiveDesc>&) { return std::vector<Tensor>{tensor}; };
  return Work(g.submit("broadcast", desc, what, g.check, std::move(job)));
}

Work ProcessGroup::all_gather_async(const Tensor& input) {
  check_tensor("all_gather", input, "input");
  TG_CHECK(input.dim() <= CollectiveDesc::kMaxDims, "ProcessGroup: all_gather: tensors of at most ",
           CollectiveDesc::kMaxDims, " dims, got ", input.dim());
  Impl& g = *impl_;
  CollectiveDesc desc = detail::describe(Collective::AllGather, input);
  std::string what = what_of("all_gather", input);
  // The shapes of every rank's input come from the descriptions (the exchange is always made).
  if (input.device().is_cuda()) {
    std::vector<CollectiveDesc> ranks = g.compare("all_gather", desc, what, true);
    std::vector<Tensor> outputs;
    for (const CollectiveDesc& d : ranks)
      outputs.push_back(empty(d.shape(), TensorOptions(input.dtype()).device(input.device())));
    return Work(g.nccl_for(input.device().index()).all_gather(outputs, input));
  }
  struct Buffers {
    Tensor flat;
    std::vector<int> counts, displacements;
  };
  auto buffers = std::make_shared<Buffers>();
  MpiJob job;
  job.keep_alive.push_back(buffers);
  MPI_Comm comm = g.comm;
  job.post = [input, buffers, comm](const std::vector<CollectiveDesc>& ranks, std::vector<MPI_Request>& requests) {
    int64_t total = 0;
    for (const CollectiveDesc& d : ranks) {
      buffers->displacements.push_back(int(total));
      buffers->counts.push_back(int(d.numel()));
      total += d.numel();
      TG_CHECK(total <= INT_MAX, "ProcessGroup: all_gather: the ranks' inputs have more than ", INT_MAX,
               " elements in all");
    }
    buffers->flat = empty({total}, input.dtype());
    MPI_Datatype type = detail::mpi_datatype(input.dtype());
    requests.resize(1);
    detail::check_mpi(MPI_Iallgatherv(address(input), int(input.numel()), type, address(buffers->flat),
                                      buffers->counts.data(), buffers->displacements.data(), type, comm, &requests[0]),
                      "MPI_Iallgatherv");
  };
  job.finish = [buffers](const std::vector<CollectiveDesc>& ranks) {
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> outputs;
    for (size_t r = 0; r < ranks.size(); ++r)
      outputs.push_back(buffers->flat.narrow(0, buffers->displacements[r], buffers->counts[r]).view(ranks[r].shape()));
    return outputs;
  };
  return Work(g.submit("all_gather", desc, what, true, std::move(job)));
}

Work ProcessGroup::reduce_scatter_async(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  Impl& g = *impl_;
  check_tensor("reduce_scatter", output, "output");
  check_op("reduce_scatter", op, output.dtype());
  TG_CHECK(int(inputs.size()) == g.size, "ProcessGroup: reduce_scatter: needs one input per rank (", g.size, "), got ",
           inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    check_tensor("reduce_scatter", inputs[r], "input");
    TG_CHECK(inputs[r].dtype() == output.dtype() && inputs[r].device() == output.device(),
             "ProcessGroup: reduce_scatter: input ", r, " is ", dtype_name(inputs[r].dtype()), " on ",
             inputs[r].device(), ", the output ", dtype_name(output.dtype()), " on ", output.device());
  }
  TG_CHECK(inputs[size_t(g.rank)].sizes() == output.sizes(), "ProcessGroup: reduce_scatter: the output of rank ",
           g.rank, " has shape ", shape_str(output.sizes()), " but its piece, input ", g.rank, ", has shape ",
           shape_str(inputs[size_t(g.rank)].sizes()));
  CollectiveDesc desc = detail::describe(Collective::ReduceScatter, output, op, -1, inputs);
  std::string what = what_of("reduce_scatter", output, reduce_op_name(op));
  output.storage()->bump_version();
  if (output.device().is_cuda()) {
    g.compare("reduce_scatter", desc, what, false);
    return Work(g.nccl_for(output.device().index()).reduce_scatter(output, inputs, op));
  }
  Tensor send;
  std::vector<int> counts;
  {
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> flat;
    for (const Tensor& piece : inputs) {
      flat.push_back(piece.reshape({-1}));
      counts.push_back(int(piece.numel()));
    }
    send = cat(flat, 0);
  }
  TG_CHECK(send.numel() <= INT_MAX, "ProcessGroup: reduce_scatter: the inputs have more than ", INT_MAX,
           " elements in all");
  auto kept_counts = std::make_shared<std::vector<int>>(std::move(counts));
  MpiJob job;
  job.keep_alive.push_back(kept_counts);
  MPI_Comm comm = g.comm;
  int size = g.size;
  job.post = [send, output, kept_counts, op, comm](const std::vector<CollectiveDesc>&,
                                                   std::vector<MPI_Request>& requests) {
    requests.resize(1);
    detail::check_mpi(
        MPI_Ireduce_scatter(address(send), address(output), kept_counts->data(), detail::mpi_datatype(output.dtype()),
                            detail::mpi_op(op, output.dtype()), comm, &requests[0]),
        "MPI_Ireduce_scatter");
  };
  job.finish = [output, op, size](const std::vector<CollectiveDesc>&) {
    if (op == ReduceOp::Avg) divide_in_place(output, size);
    return std::vector<Tensor>{output};
  };
  return Work(g.submit("reduce_scatter", desc, what, g.check, std::move(job)));
}

Work ProcessGroup::barrier_async() {
  Impl& g = *impl_;
  MpiJob job;
  MPI_Comm comm = g.comm;
  job.post = [comm](const std::vector<CollectiveDesc>&, std::vector<MPI_Request>& requests) {
    requests.resize(1);
    detail::check_mpi(MPI_Ibarrier(comm, &requests[0]), "MPI_Ibarrier");
  };
  return Work(g.submit("barrier", detail::describe(Collective::Barrier, Tensor()), "barrier", g.check, std::move(job)));
}

int ProcessGroup::max_tag() const {
  return impl_->max_tag;
}

void ProcessGroup::abort(const std::string& reason) {
  impl_->queue->abort(reason);
}

namespace {
// The checks every send/recv makes up front, on the caller's thread.
void check_p2p(const char* op, const Tensor& tensor, int peer, const char* peer_name, int tag, int rank, int size,
               int max_tag) {
  check_tensor(op, tensor);
  TG_CHECK(!tensor.device().is_cuda() || is_nccl_available(), "ProcessGroup: ", op,
           ": CUDA tensors travel over NCCL, and this build of tapegrad has none (configured without CUDA, or NCCL "
           "was not found beside the CUDA toolkit: set NCCL_ROOT); copy to the CPU first");
  TG_CHECK(tensor.dim() <= CollectiveDesc::kMaxDims, "ProcessGroup: ", op, ": tensors of at most ",
           CollectiveDesc::kMaxDims, " dims, got ", tensor.dim());
  TG_CHECK(peer >= 0 && peer < size, "ProcessGroup: ", op, ": ", peer_name, " ", peer,
           " is not a rank of this group of ", size);
  TG_CHECK(peer != rank, "ProcessGroup: ", op, ": ", peer_name, " ", peer, " is this rank; a rank cannot ", op,
           " to or from itself");
  TG_CHECK(tag >= 0 && tag <= max_tag, "ProcessGroup: ", op, ": tag ", tag, " is out of range [0, ", max_tag, "]");
}
// One half of a pair, queued for the MPI thread (send: to `peer`; recv: from it).
Work submit_p2p(ProcessGroup::Impl& g, bool is_send, const Tensor& tensor, int peer, int tag, bool unchecked = false) {
  const char* op = is_send ? "send" : "recv";
  check_p2p(op, tensor, peer, is_send ? "dst" : "src", tag, g.rank, g.size, g.max_tag);
  if (!is_send) tensor.storage()->bump_version();  // the recv writes it
  auto job = std::make_shared<detail::P2pJob>();
  job->work = std::make_shared<WorkState>(op);
  job->work->waiters = g.queue->waiters();
  job->is_send = is_send;
  job->unchecked = unchecked;
  job->peer = peer;
  job->tag = tag;
  job->tensor = tensor;
  job->what = str_cat(op, is_send ? " to rank " : " from rank ", peer, " (", dtype_name(tensor.dtype()), " ",
                      shape_str(tensor.sizes()), ", tag ", tag, ")");
  job->deadline = detail::deadline_after(Clock::now(), g.timeout);
  std::shared_ptr<WorkState> work = job->work;
  if (unchecked)
    g.queue->submit_unchecked(std::move(job));
  else
    g.queue->submit_p2p(std::move(job));
  return Work(work);
}

// A CUDA tensor: the two sides first swap headers over MPI (a checked pair each way), so that a
// mismatch is the same Error on both before anything is queued on a GPU; then the transfer runs on
// NCCL, on the current stream, over the pair's communicator. Returns once the transfer is queued.
Work submit_p2p_nccl(ProcessGroup& group, ProcessGroup::Impl& g, bool is_send, const Tensor& tensor, int peer,
                     int tag) {
  const char* op = is_send ? "send" : "recv";
  check_p2p(op, tensor, peer, is_send ? "dst" : "src", tag, g.rank, g.size, g.max_tag);
  Tensor mine = zeros({detail::P2pJob::kHeaderLength}, kInt64), theirs = empty({detail::P2pJob::kHeaderLength}, kInt64);
  int64_t* h = mine.data<int64_t>();
  h[0] = int64_t(tensor.dtype()) * 2 + (is_send ? 1 : 0);  // which way this side goes, beside the dtype
  h[1] = tensor.numel();
  h[2] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) h[3 + d] = tensor.size(d);
  Work out = submit_p2p(g, true, mine, peer, tag), in = submit_p2p(g, false, theirs, peer, tag);
  // Both halves are waited for even when one fails, so that no swap stays queued to take the
  // peer's next message on this tag.
  std::exception_ptr swap_error;
  for (Work* w : {&out, &in}) {
    try {
      w->wait();
    } catch (...) {
      if (!swap_error) swap_error = std::current_exception();
    }
  }
  if (swap_error) {
    try {
      std::rethrow_exception(swap_error);
    } catch (const Error& e) {
      TG_CHECK(false, "ProcessGroup: ", op, " of a CUDA tensor with rank ", peer, " (tag ", tag,
               "): the two sides could not swap their descriptions (did rank ", peer,
               " call a CPU send/recv on this tag?): ", e.what());
    }
  }
  const int64_t* w = theirs.data<int64_t>();
  auto describe = [](const int64_t* header) {
    return str_cat(dtype_name(DType(header[0] / 2)), " ", shape_str(Shape(header + 3, header + 3 + header[2])),
                   " on a GPU");
  };
  TG_CHECK((w[0] % 2 == 1) != is_send, "ProcessGroup: ", op, " of a CUDA tensor: rank ", peer, " called ",
           is_send ? "send" : "recv", " too (tag ", tag, "), so the two calls do not pair; nothing was transferred");
  const int sender = is_send ? g.rank : peer, receiver = is_send ? peer : g.rank;
  bool same = h[0] / 2 == w[0] / 2;
  for (int i = 1; i < detail::P2pJob::kHeaderLength; ++i) same = same && h[i] == w[i];
  TG_CHECK(same, "ProcessGroup: send from rank ", sender, " to rank ", receiver, " and its recv (tag ", tag,
           ") do not match: rank ", sender, " sends ", describe(is_send ? h : w), ", rank ", receiver,
           " receives into ", describe(is_send ? w : h), "; nothing was transferred");
  detail::NcclComm& comm = g.nccl_pair(group, tensor.device().index(), peer, tag);
  const int pair_peer = peer < g.rank ? 0 : 1;
  if (!is_send) tensor.storage()->bump_version();  // the recv writes it
  return Work(is_send ? comm.send(tensor, pair_peer) : comm.recv(tensor, pair_peer));
}

}  // namespace

Work detail::isend_unchecked(ProcessGroup& group, const Tensor& tensor, int dst, int tag) {
  return submit_p2p(*group.impl_, true, tensor, dst, tag, true);
}
Work detail::irecv_unchecked(ProcessGroup& group, const Tensor& tensor, int src, int tag) {
  return submit_p2p(*group.impl_, false, tensor, src, tag, true);
}

Work ProcessGroup::isend(const Tensor& tensor, int dst, int tag) {
  if (tensor.defined() && tensor.device().is_cuda()) return submit_p2p_nccl(*this, *impl_, true, tensor, dst, tag);
  return submit_p2p(*impl_, true, tensor, dst, tag);
}
Work ProcessGroup::irecv(const Tensor& tensor, int src, int tag) {
  if (tensor.defined() && tensor.device().is_cuda()) return submit_p2p_nccl(*this, *impl_, false, tensor, src, tag);
  return submit_p2p(*impl_, false, tensor, src, tag);
}

void ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  isend(tensor, dst, tag).wait();
}
void ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  irecv(tensor, src, tag).wait();
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op).wait();
}
void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  broadcast_async(tensor, root).wait();
}
std::vector<Tensor> ProcessGroup::all_gather(const Tensor& input) {
  return all_gather_async(input).result();
}
void ProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  reduce_scatter_async(output, inputs, op).wait();
}
void ProcessGroup::barrier() {
  barrier_async().wait();
}

}  // namespace tapegrad::distributed
