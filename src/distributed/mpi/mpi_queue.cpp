// The process group's worker: one collective at a time, polled against its deadline.
#include "distributed/mpi/mpi_queue.h"

#include "distributed/deadline.h"
#include "distributed/mpi/mpi_runtime.h"

namespace tapegrad::distributed::detail {

using ::tapegrad::detail::str_cat;
using ::tapegrad::detail::throw_error;
using Clock = std::chrono::steady_clock;

namespace {

// A job whose collective timed out: MPI may still write into its buffers (if the other ranks ever
// join), so it and its requests are kept until the process exits.
struct Abandoned {
  MpiJob job;
  std::vector<MPI_Request> requests;
};
void abandon(MpiJob job, std::vector<MPI_Request> requests) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Abandoned>();  // never freed, on purpose
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(Abandoned{std::move(job), std::move(requests)});
}

}  // namespace

MpiQueue::MpiQueue(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout)
    : comm_(comm), rank_(rank), size_(size), timeout_(timeout) {
  worker_ = std::thread([this] { work_loop(); });
}

MpiQueue::~MpiQueue() {
  stop();
}

void MpiQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool MpiQueue::broken() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
  return !broken_.empty();
}

void MpiQueue::submit(MpiJob job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

std::vector<Tensor> MpiQueue::run(MpiJob job) {
  std::shared_ptr<WorkState> work = job.work;
  submit(std::move(job));
  work->wait();
  std::lock_guard<std::mutex> lock(work->mutex);
  return work->outputs;
}

void MpiQueue::work_loop() {
  for (;;) {
    MpiJob job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, and everything queued has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    run_job(job);
  }
}

bool MpiQueue::poll(std::vector<MPI_Request>& requests, Clock::time_point deadline) {
  // MPI_Test drives MPI's progress. Spin briefly (small collectives finish in microseconds), then
  // back off so that a waiting worker leaves the core to the caller's computation. The back-off
  // stops growing at 100 us: on shared memory data only moves while some test runs, so a longer
  // sleep is added in full to every collective that outlasts the spin (a 1 ms cap made a 4 KiB
  // all-reduce take 0.5 ms), while a test every 100 us costs the computation about 1%.
  auto pause = std::chrono::microseconds(0);
  for (int tries = 0;; ++tries) {
    int done = 0;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check_mpi(MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    }
    if (done) return true;
    if (Clock::now() >= deadline) return false;
    if (tries < 50) {
      std::this_thread::yield();
    } else {
      pause = std::min(std::chrono::microseconds(100), pause + std::chrono::microseconds(10));
      std::this_thread::sleep_for(pause);
    }
  }
}

void MpiQueue::run_job(MpiJob& job) {
  std::string broken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken = broken_;
  }
  if (!broken.empty()) {
    job.work->fail(std::make_exception_ptr(
        Error(str_cat("ProcessGroup: ", job.what, ": the process group can no longer be used: ", broken))));
    return;
  }
  const int64_t sequence = ++sequence_;
  const Clock::time_point deadline = deadline_after(Clock::now(), timeout_);
  auto timed_out = [&](const char* stage, std::vector<MPI_Request> requests) {
    std::string message = str_cat(job.what, " (collective number ", sequence, " of this group) did not finish within ",
                                  timeout_.count(), " ms on rank ", rank_, " of ", size_, ", ", stage,
                                  ": another rank may have failed, be stuck, or be calling a different collective");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broken_ = message;
    }
    job.work->fail(std::make_exception_ptr(Error(str_cat("ProcessGroup: ", message))));
    abandon(std::move(job), std::move(requests));
  };
  try {
    job.work->mark_started();
    std::vector<CollectiveDesc> ranks;
    if (job.exchange_descs) {
      // Every rank's description of this call, compared before any data moves. The buffers are
      // shared with the job, which outlives the request even if it is abandoned.
      auto exchange = std::make_shared<std::pair<CollectiveDesc, std::vector<CollectiveDesc>>>(
          job.desc, std::vector<CollectiveDesc>(size_t(size_)));
      job.keep_alive.push_back(exchange);
      std::vector<MPI_Request> requests(1);
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        check_mpi(MPI_Iallgather(exchange->first.words.data(), CollectiveDesc::kLength, MPI_INT64_T,
                                 exchange->second.data(), CollectiveDesc::kLength, MPI_INT64_T, comm_, &requests[0]),
                  "MPI_Iallgather");
      }
      if (!poll(requests, deadline)) return timed_out("while the ranks compared their arguments", std::move(requests));
      ranks = exchange->second;
      std::string mismatch = find_mismatch(ranks, sequence);
      // Every rank sees the same descriptions, so every rank fails here alike and the group stays usable.
      if (!mismatch.empty()) return job.work->fail(std::make_exception_ptr(Error(mismatch)));
    }
    std::vector<MPI_Request> requests;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      job.post(ranks, requests);
    }
    if (!poll(requests, deadline)) return timed_out("while exchanging data", std::move(requests));
    job.work->complete(job.finish ? job.finish(ranks) : std::vector<Tensor>{});
  } catch (...) {
    job.work->fail(std::current_exception());
  }
}

}  // namespace tapegrad::distributed::detail
