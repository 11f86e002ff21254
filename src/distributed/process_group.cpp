// The parts of the distributed API that do not depend on MPI: Work handles, reduce op names and
// the default group.
#include "tapegrad/distributed/process_group.h"

#include <mutex>

#include "distributed/work_state.h"

namespace tapegrad::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "unknown";
}

namespace detail {

void WorkState::mark_started() {
  std::lock_guard<std::mutex> lock(mutex);
  if (started == Clock::time_point{}) started = Clock::now();
}

void WorkState::complete(std::vector<Tensor> result) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    outputs = std::move(result);
    finished = Clock::now();
    if (started == Clock::time_point{}) started = finished;
    done = true;
  }
  cv.notify_all();
}

void WorkState::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    error = e;
    finished = Clock::now();
    done = true;
  }
  cv.notify_all();
}

void WorkState::wait() {
  {
    struct Waiting {
      std::atomic<int>* count;
      explicit Waiting(std::atomic<int>* c) : count(c) {
        if (count) ++*count;
      }
      ~Waiting() {
        if (count) --*count;
      }
    } waiting(waiters.get());
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }
  if (device_wait) device_wait();
}

bool WorkState::is_completed() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!done) return false;
    if (error) return true;
  }
  return !device_query || device_query();
}

}  // namespace detail

namespace {
detail::WorkState& checked(const std::shared_ptr<detail::WorkState>& state) {
  TG_CHECK(state != nullptr, "Work: this handle refers to no collective (default-constructed)");
  return *state;
}
}  // namespace

void Work::wait() const {
  checked(state_).wait();
}
bool Work::is_completed() const {
  return checked(state_).is_completed();
}
std::vector<Tensor> Work::result() const {
  detail::WorkState& state = checked(state_);
  state.wait();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.outputs;
}
const std::string& Work::name() const {
  return checked(state_).name;
}
Work::TimePoint Work::start_time() const {
  detail::WorkState& state = checked(state_);
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.started;
}
Work::TimePoint Work::end_time() const {
  detail::WorkState& state = checked(state_);
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.finished;
}

namespace {
std::mutex g_default_mutex;
std::shared_ptr<ProcessGroup> g_default_group;  // guarded by g_default_mutex
}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options) {
  std::lock_guard<std::mutex> lock(g_default_mutex);
  if (!g_default_group) g_default_group = std::make_shared<ProcessGroup>(options);
  return g_default_group;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(g_default_mutex);
    group = std::move(g_default_group);
  }
  // Destroyed outside the lock (it joins its worker thread).
}

}  // namespace tapegrad::distributed
