// The process group's worker: one collective at a time, polled against its deadline.
#include "distributed/mpi/mpi_queue.h"

#include <algorithm>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <tuple>

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

void abandon_p2p(std::shared_ptr<P2pJob> job) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<P2pJob>>();  // never freed, on purpose
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(job));
}

// The three messages of one send/recv pair.
enum P2pKind { kHeader = 0, kAnswer = 1, kPayload = 2, kUnchecked = 3 };
int mpi_tag(int tag, P2pKind kind) {
  return tag * 4 + kind;
}

std::string header_str(const std::array<int64_t, P2pJob::kHeaderLength>& h) {
  Shape shape(h.begin() + 3, h.begin() + 3 + h[2]);
  return str_cat(dtype_name(DType(h[0])), " ", shape_str(shape));
}

// The same message on both sides of a mismatched pair.
std::string p2p_mismatch(int sender, int receiver, int tag, const std::array<int64_t, P2pJob::kHeaderLength>& sent,
                         const std::array<int64_t, P2pJob::kHeaderLength>& received) {
  const char* what = sent[0] != received[0] ? "dtype" : "shape";
  return str_cat("ProcessGroup: send from rank ", sender, " to rank ", receiver, " and its recv (tag ", tag,
                 ") do not match: rank ", sender, " sends ", header_str(sent), ", rank ", receiver, " receives into ",
                 header_str(received), " (the ", what, " differs); nothing was transferred");
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

void MpiQueue::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_ = str_cat("it was aborted: ", reason);
    abort_p2p_ = true;
  }
  cv_.notify_all();
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

void MpiQueue::submit_p2p(std::shared_ptr<P2pJob> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    new_p2p_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void MpiQueue::work_loop() {
#ifdef __linux__
  // Linux lets a 100 us sleep last 150-200 us (50 us of timer slack by default); each step of a p2p
  // rendezvous waits for one, so the worker asks for exact wake-ups.
  prctl(PR_SET_TIMERSLACK, 1UL);
#endif
  int64_t moves_seen = 0, idle_rounds = 0;
  for (;;) {
    MpiJob job;
    bool have_job = false;
    bool p2p_pending = progress_p2p();
    // Rounds since a p2p last moved: a pair's header, answer and payload follow each other within
    // microseconds once both sides are at it, so right after a move, or while a caller is blocked
    // on some work (for at most 100000 rounds without a move, some 100 ms), the worker only yields; a pair whose peer
    // is busy elsewhere is tested at the collectives' pace (every 100 us, ~1% of a core).
    idle_rounds = p2p_moves_ != moves_seen ? 0 : idle_rounds + 1;
    moves_seen = p2p_moves_;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] { return stop_ || !jobs_.empty() || !new_p2p_.empty(); };
      // With p2p in flight the worker keeps testing it (MPI only progresses inside calls), at the
      // pace above; otherwise it sleeps until something is submitted.
      if (p2p_pending && (idle_rounds < 200 || (*waiters_ > 0 && idle_rounds < 100000)) && !ready()) {
        lock.unlock();
        std::this_thread::yield();
        continue;
      } else if (p2p_pending) {
        const int64_t pause_us = std::min<int64_t>(100, 10 * (idle_rounds - 199));
        cv_.wait_for(lock, std::chrono::microseconds(pause_us), ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
        have_job = true;
      } else if (stop_ && new_p2p_.empty() && !p2p_pending) {
        return;  // everything queued has run
      }
    }
    if (have_job) run_job(job);
  }
}

bool MpiQueue::progress_p2p() {
  std::string broken;
  bool aborting = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& job : new_p2p_) p2p_.push_back(std::move(job));
    new_p2p_.clear();
    broken = broken_;
    aborting = abort_p2p_;
  }
  if (aborting) {
    // Started or not, every pair fails now; a started one's buffers stay with MPI.
    for (auto& job : p2p_) {
      job->work->fail(std::make_exception_ptr(
          Error(str_cat("ProcessGroup: ", job->what, ": the process group can no longer be used: ", broken))));
      if (job->stage != 0) abandon_p2p(job);
    }
    p2p_.clear();
    return false;
  }
  std::vector<std::tuple<bool, int, int>> active;  // the channels whose oldest job was seen
  std::vector<std::shared_ptr<P2pJob>> left;
  for (auto& job : p2p_) {
    // Unchecked transfers are all posted at once: MPI orders them; checked pairs go one at a time
    // per channel, so that a header, its answer and its payload never mix with the next pair's.
    std::tuple<bool, int, int> channel{job->is_send, job->peer, job->tag};
    bool first = job->unchecked || std::find(active.begin(), active.end(), channel) == active.end();
    if (first && !job->unchecked) active.push_back(channel);
    if (job->stage == 0 && !broken.empty()) {  // never started: nothing of it is in MPI's hands
      job->work->fail(std::make_exception_ptr(
          Error(str_cat("ProcessGroup: ", job->what, ": the process group can no longer be used: ", broken))));
      continue;
    }
    if (first) {
      try {
        advance(*job);
      } catch (...) {
        job->work->fail(std::current_exception());
        abandon_p2p(job);  // MPI may still hold its buffers
        continue;
      }
    }
    if (job->stage < 0) continue;  // finished
    if (Clock::now() >= job->deadline) {
      fail_p2p_timeout(job);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        broken = broken_;
      }
      continue;
    }
    left.push_back(job);
  }
  p2p_ = std::move(left);
  return !p2p_.empty();
}

void MpiQueue::post_unchecked_locked(P2pJob& job, void* data, MPI_Datatype type) {
  job.work->mark_started();
  job.requests.assign(1, MPI_REQUEST_NULL);
  const int count = int(job.tensor.numel()), tag = mpi_tag(job.tag, kUnchecked);
  check_mpi(job.is_send ? MPI_Isend(data, count, type, job.peer, tag, comm_, &job.requests[0])
                        : MPI_Irecv(data, count, type, job.peer, tag, comm_, &job.requests[0]),
            job.is_send ? "MPI_Isend" : "MPI_Irecv");
  job.stage = 1;
}

void MpiQueue::submit_unchecked(std::shared_ptr<P2pJob> job) {
  // Posted here, on the caller's thread: the message leaves now (a small one completes at once)
  // instead of when the worker next gets a core, which a busy machine may delay by milliseconds.
  // The worker only tests it from then on. Not on a broken group: the worker fails it instead.
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    post = broken_.empty();
  }
  if (post) {
    static char empty_buffer[16];
    void* data = job->tensor.numel() == 0 ? empty_buffer : job->tensor.data_ptr();
    std::lock_guard<std::mutex> lock(mpi_mutex());
    post_unchecked_locked(*job, data, mpi_datatype(job->tensor.dtype()));
  }
  submit_p2p(std::move(job));
}

void MpiQueue::advance(P2pJob& job) {
  MPI_Datatype type = mpi_datatype(job.tensor.dtype());
  static char empty_buffer[16];
  void* data = job.tensor.numel() == 0 ? empty_buffer : job.tensor.data_ptr();
  std::lock_guard<std::mutex> lock(mpi_mutex());
  if (job.unchecked) {
    if (job.stage == 0) {
      post_unchecked_locked(job, data, type);
      ++p2p_moves_;
      return;
    }
    int done = 0;
    check_mpi(MPI_Test(&job.requests[0], &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) return;
    job.stage = -1;
    ++p2p_moves_;
    job.work->complete({job.tensor});
    return;
  }
  if (job.stage == 0) {
    job.work->mark_started();
    job.mine[0] = int64_t(job.tensor.dtype());
    job.mine[1] = job.tensor.numel();
    job.mine[2] = job.tensor.dim();
    for (int d = 0; d < job.tensor.dim(); ++d) job.mine[size_t(3 + d)] = job.tensor.sizes()[size_t(d)];
    if (job.is_send) {
      // The header out, and the receiver's answer (its own header) back.
      job.requests.assign(2, MPI_REQUEST_NULL);
      check_mpi(MPI_Isend(job.mine.data(), P2pJob::kHeaderLength, MPI_INT64_T, job.peer, mpi_tag(job.tag, kHeader),
                          comm_, &job.requests[0]),
                "MPI_Isend");
      check_mpi(MPI_Irecv(job.theirs.data(), P2pJob::kHeaderLength, MPI_INT64_T, job.peer, mpi_tag(job.tag, kAnswer),
                          comm_, &job.requests[1]),
                "MPI_Irecv");
    } else {
      job.requests.assign(1, MPI_REQUEST_NULL);
      check_mpi(MPI_Irecv(job.theirs.data(), P2pJob::kHeaderLength, MPI_INT64_T, job.peer, mpi_tag(job.tag, kHeader),
                          comm_, &job.requests[0]),
                "MPI_Irecv");
    }
    job.stage = 1;
    ++p2p_moves_;
    return;
  }
  int done = 0;
  check_mpi(MPI_Testall(int(job.requests.size()), job.requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  if (!done) return;
  if (job.stage == 1) {
    // Both headers are known on this side: compare them (the other side does the same).
    job.matched = job.mine == job.theirs;
    const bool move_data = job.matched && job.tensor.numel() > 0;
    job.requests.clear();
    if (job.is_send) {
      if (move_data) {
        job.requests.push_back(MPI_REQUEST_NULL);
        check_mpi(MPI_Isend(data, int(job.tensor.numel()), type, job.peer, mpi_tag(job.tag, kPayload), comm_,
                            &job.requests.back()),
                  "MPI_Isend");
      }
    } else {
      job.requests.push_back(MPI_REQUEST_NULL);
      check_mpi(MPI_Isend(job.mine.data(), P2pJob::kHeaderLength, MPI_INT64_T, job.peer, mpi_tag(job.tag, kAnswer),
                          comm_, &job.requests.back()),
                "MPI_Isend");
      if (move_data) {
        job.requests.push_back(MPI_REQUEST_NULL);
        check_mpi(MPI_Irecv(data, int(job.tensor.numel()), type, job.peer, mpi_tag(job.tag, kPayload), comm_,
                            &job.requests.back()),
                  "MPI_Irecv");
      }
    }
    job.stage = 2;
    ++p2p_moves_;
    if (!job.requests.empty()) return;
  }
  job.stage = -1;
  ++p2p_moves_;
  if (job.matched) {
    job.work->complete({job.tensor});
  } else {
    const int sender = job.is_send ? rank_ : job.peer, receiver = job.is_send ? job.peer : rank_;
    const auto& sent = job.is_send ? job.mine : job.theirs;
    const auto& received = job.is_send ? job.theirs : job.mine;
    job.work->fail(std::make_exception_ptr(Error(p2p_mismatch(sender, receiver, job.tag, sent, received))));
  }
}

void MpiQueue::fail_p2p_timeout(std::shared_ptr<P2pJob> job) {
  std::string hint;
  if (!job->is_send && job->stage == 1) {
    // Whether the peer sent something under another tag: a likely cause worth naming.
    std::lock_guard<std::mutex> lock(mpi_mutex());
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(job->peer, MPI_ANY_TAG, comm_, &flag, &status) == MPI_SUCCESS && flag &&
        status.MPI_TAG % 4 == kHeader)
      hint = str_cat("; rank ", job->peer, " did send a tensor with tag ", status.MPI_TAG / 4, " that no recv took");
  }
  const char* peer_role = job->is_send ? "no matching recv was posted by rank " : "no matching send came from rank ";
  std::string message =
      str_cat(job->what, " did not finish within ", timeout_str(timeout_), " on rank ", rank_, " of ", size_, ": ",
              peer_role, job->peer, hint, " (it may have failed, be stuck, or use another tag, dtype or shape)");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_ = message;
  }
  job->work->fail(std::make_exception_ptr(Error(str_cat("ProcessGroup: ", message))));
  abandon_p2p(std::move(job));
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
    progress_p2p();  // p2p in flight moves on while a collective waits (a peer may need it to join)
    if (tries < 50 || (*waiters_ > 0 && tries < 100000)) {  // a blocked caller leaves its core (for a while)
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
