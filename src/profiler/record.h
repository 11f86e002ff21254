// The profiler's recording hooks, called from the profiled kernel tables (profiled_kernels.cpp),
// the autograd engine, Range and the allocators. Each hook starts with active(), one relaxed load: that branch is all a
// dispatch pays while no profiler runs.
//
// Note [profiler events]: each thread keeps a stack of its open events; an event closes in LIFO
// order (they are RAII scopes) and then joins the session's list under one mutex, so nesting is
// exact per thread. An event opened in one session and closed after stop() is dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "tapegrad/core/device.h"
#include "tapegrad/cuda/stream.h"
#include "tapegrad/profiler/profiler.h"

namespace tapegrad::profiler::detail {

extern std::atomic<bool> g_active;
inline bool active() {
  return g_active.load(std::memory_order_relaxed);
}

// What the running session records (valid while active()).
const ProfilerOptions& session_options();

// Opens an event on the calling thread and returns its token (-1 when no session runs).
int64_t open_event(std::string name, EventKind kind);
// The calling thread's innermost open event, to fill in details; null if `token` is not it.
ProfilerEvent* open_event_data(int64_t token);
// Closes the calling thread's innermost event (which must be `token`'s).
void close_event(int64_t token);
// GPU timing of the CUDA kernel event `token`: start and end were recorded around its launch.
void add_cuda_timing(int64_t token, int device, const cuda::Event& start, const cuda::Event& end);

// An allocator's hook: `delta` bytes (negative when freed) on `device`, as the allocator counts
// them, for the block at `ptr`. Call outside the allocator's own lock.
void note_memory(Device device, int64_t delta, const void* ptr) noexcept;
// The kernel event `token` takes the block at `ptr` as an argument: if the block was allocated
// just before, at the kernel's level, it counts to the kernel (Note [output memory]).
void claim_allocation(int64_t token, const void* ptr);

// An open event for the lifetime of the scope (nothing when no session runs).
class EventScope {
 public:
  EventScope(std::string name, EventKind kind) : token_(open_event(std::move(name), kind)) {}
  ~EventScope() {
    if (token_ >= 0) close_event(token_);
  }
  EventScope(const EventScope&) = delete;
  EventScope& operator=(const EventScope&) = delete;
  ProfilerEvent* data() const { return open_event_data(token_); }
  int64_t token() const { return token_; }

 private:
  int64_t token_;
};

// The name of the event of an autograd node: "linear" -> "LinearBackward", as PyTorch names them.
std::string backward_event_name(const std::string& node_name);

// The profiled kernel tables (profiled_kernels.cpp): prepare_profiled_kernels() makes them (and so
// registers the backends) once; install_profiled_kernels(true) makes them the kernel table's
// decorator, so that every dispatch records an event, and (false) removes them. Called by
// begin_session and end_session.
void prepare_profiled_kernels();
void install_profiled_kernels(bool on);

// Session control for Profiler (recorder.cpp).
int64_t begin_session(const ProfilerOptions& options);
struct SessionResult {
  std::vector<ProfilerEvent> events;
  std::vector<MemorySample> memory;
  std::vector<DeviceMemory> devices;
};
SessionResult end_session(int64_t session);

// NVTX ranges (cuda/runtime/nvtx.cpp in a CUDA build, no-ops otherwise).
void nvtx_push(const char* name);
void nvtx_pop();

}  // namespace tapegrad::profiler::detail
