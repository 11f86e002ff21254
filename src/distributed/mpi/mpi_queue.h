// The worker thread of one process group: it runs the group's collectives one at a time, in the
// order they were submitted (the same order on every rank), as non-blocking MPI calls that it
// polls against a deadline. The caller's thread only queues work, so a collective overlaps
// whatever the caller does next (DistributedDataParallel's remaining backward), and a hang becomes
// an error naming the collective once the deadline passes.
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/collective_check.h"
#include "distributed/work_state.h"

namespace tapegrad::distributed::detail {

struct MpiJob {
  std::shared_ptr<WorkState> work;
  CollectiveDesc desc;
  std::string what;            // for messages: "all_reduce (float32 [4, 3], sum)"
  bool exchange_descs = true;  // compare descriptions first (all_gather always needs them)
  // Posts the non-blocking MPI calls (under mpi_mutex), given every rank's description.
  std::function<void(const std::vector<CollectiveDesc>& ranks, std::vector<MPI_Request>& requests)> post;
  // After the requests completed: the work's result (and any finishing step, e.g. avg's division).
  std::function<std::vector<Tensor>(const std::vector<CollectiveDesc>& ranks)> finish;
  std::vector<std::shared_ptr<void>> keep_alive;  // buffers MPI reads or writes until the requests complete
};

// One send or recv between this rank and `peer`, which the worker moves through a rendezvous:
// the sender posts a header (dtype, shape), the receiver answers with its own, each compares the
// two, and only a match moves the payload. The three messages have their own MPI tags (tag * 4 +
// kind), so p2p between the same two ranks in both directions never confuse them.
struct P2pJob {
  static constexpr int kHeaderLength = 3 + CollectiveDesc::kMaxDims;  // dtype, numel, dims, the dims
  std::shared_ptr<WorkState> work;
  bool is_send = true;
  // An unchecked transfer: the two sides already agree on dtype and shape (a protocol above them
  // settled it, as Pipeline's headers do), so the payload is posted at once under its own MPI tag
  // (tag * 4 + 3), with no header and no answer. A small one completes without waiting for the
  // peer (MPI's eager protocol); MPI keeps those of one (peer, tag) in order.
  bool unchecked = false;
  int peer = 0, tag = 0;
  Tensor tensor;
  std::string what;  // for messages: "send to rank 1 (float32 [4], tag 0)"
  // The worker's state.
  int stage = 0;
  bool matched = true;
  std::chrono::steady_clock::time_point deadline;
  std::array<int64_t, kHeaderLength> mine{}, theirs{};
  std::vector<MPI_Request> requests;
};

class MpiQueue {
 public:
  MpiQueue(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout);
  // Finishes the queued jobs (or fails them, if the group broke), then stops the worker.
  ~MpiQueue();
  void submit(MpiJob job);
  // Starts a send or recv; the worker advances it alongside the collectives.
  void submit_p2p(std::shared_ptr<P2pJob> job);
  // An unchecked one: posted to MPI on the caller's thread, then tested by the worker.
  void submit_unchecked(std::shared_ptr<P2pJob> job);
  // The count of callers blocked on this queue's work (WorkState::waiters).
  const std::shared_ptr<std::atomic<int>>& waiters() const { return waiters_; }
  // Runs `job` and waits for it (the caller's bootstrap steps).
  std::vector<Tensor> run(MpiJob job);
  // Runs (or fails) what is queued, then joins the worker; idempotent.
  void stop();
  // Whether a collective timed out or the group was aborted (then the communicator must not be
  // freed: MPI may still be using it and the abandoned buffers).
  bool broken() const;
  // Fails every send and recv in flight and every collective not yet run with `reason`, keeping
  // their buffers (MPI may still hold them); the group is broken from now on.
  void abort(const std::string& reason);

 private:
  void work_loop();
  void run_job(MpiJob& job);
  // Polls until every request completed (true) or the deadline passed (false).
  bool poll(std::vector<MPI_Request>& requests, std::chrono::steady_clock::time_point deadline);
  // Advances every p2p job one step where MPI allows (worker thread only). Only the oldest job of
  // each (peer, tag, direction) is active, so one pair's header, answer and payload never mix with
  // those of the next pair on the same channel. Returns whether jobs remain.
  bool progress_p2p();
  void advance(P2pJob& job);
  void post_unchecked_locked(P2pJob& job, void* data, MPI_Datatype type);  // under mpi_mutex()
  void fail_p2p_timeout(std::shared_ptr<P2pJob> job);

  MPI_Comm comm_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  int64_t sequence_ = 0;  // collectives run so far (worker thread only)
  std::mutex mutex_;
  std::string broken_;  // why the group can no longer be used (under mutex_)
  std::condition_variable cv_;
  std::deque<MpiJob> jobs_;
  std::vector<std::shared_ptr<P2pJob>> new_p2p_;  // submitted, not yet seen by the worker (under mutex_)
  std::vector<std::shared_ptr<P2pJob>> p2p_;      // in flight, in submission order (worker thread only)
  std::shared_ptr<std::atomic<int>> waiters_ = std::make_shared<std::atomic<int>>(0);
  int64_t p2p_moves_ = 0;  // p2p stage changes so far (worker thread only)
  bool stop_ = false;
  bool abort_p2p_ = false;  // abort() was called: the worker fails the p2p in flight (under mutex_)
  std::thread worker_;
};

}  // namespace tapegrad::distributed::detail
