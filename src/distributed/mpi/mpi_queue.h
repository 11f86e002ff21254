// The worker thread of one process group: it runs the group's collectives one at a time, in the
// order they were submitted (the same order on every rank), as non-blocking MPI calls that it
// polls against a deadline. The caller's thread only queues work, so a collective overlaps
// whatever the caller does next (DistributedDataParallel's remaining backward), and a hang becomes
// an error naming the collective once the deadline passes.
#pragma once

#include <mpi.h>

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

class MpiQueue {
 public:
  MpiQueue(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout);
  // Finishes the queued jobs (or fails them, if the group broke), then stops the worker.
  ~MpiQueue();
  void submit(MpiJob job);
  // Runs `job` and waits for it (the caller's bootstrap steps).
  std::vector<Tensor> run(MpiJob job);
  // Runs (or fails) what is queued, then joins the worker; idempotent.
  void stop();
  // Whether a collective timed out (then the communicator must not be freed: MPI may still be
  // using it and the abandoned buffers).
  bool broken() const;

 private:
  void work_loop();
  void run_job(MpiJob& job);
  // Polls until every request completed (true) or the deadline passed (false).
  bool poll(std::vector<MPI_Request>& requests, std::chrono::steady_clock::time_point deadline);

  MPI_Comm comm_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  int64_t sequence_ = 0;  // collectives run so far (worker thread only)
  std::mutex mutex_;
  std::string broken_;  // why the group can no longer be used (under mutex_)
  std::condition_variable cv_;
  std::deque<MpiJob> jobs_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace tapegrad::distributed::detail
