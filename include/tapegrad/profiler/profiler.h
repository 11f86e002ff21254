// The profiler: records every kernel dispatch (op name, argument shapes and dtypes, device, CPU
// wall time and, for CUDA kernels, the GPU time measured with CUDA events), every autograd node
// run by backward(), user ranges (profiler::Range) and the memory each of them allocated and
// freed; exports a Chrome trace and a key_averages() table like PyTorch's.
//
//   profiler::Profiler prof;
//   prof.start();                       // or: profiler::Profiler prof(options, /*start_now=*/true);
//   { profiler::Range r("step"); train_step(); }
//   prof.stop();                        // the destructor also stops a running profiler
//   prof.export_chrome_trace("trace.json");          // open in ui.perfetto.dev or chrome://tracing
//   std::printf("%s", prof.key_averages().table(profiler::SortBy::SelfCpu, 20).c_str());
//
// One profiler runs at a time per process. While none runs, a kernel dispatch costs one extra
// branch (see docs/profiling.md for the measured overhead when on). Events from every thread are
// recorded; each thread is its own track in the trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/core/device.h"
#include "tapegrad/core/dtype.h"
#include "tapegrad/core/shape.h"
#include "tapegrad/profiler/key_averages.h"

namespace tapegrad::profiler {

struct ProfilerOptions {
  bool record_shapes = true;   // the shapes and dtypes of each kernel's tensor arguments
  bool profile_memory = true;  // bytes allocated and freed per event, and the memory timeline
  bool cuda_timing = true;     // GPU time of CUDA kernels from events (read back at stop())
};

enum class EventKind {
  Kernel,    // one kernel dispatch through the backend's table (on any device)
  Autograd,  // one autograd node run by backward(), e.g. "LinearBackward"
  Range,     // a profiler::Range opened by the user
};
const char* event_kind_name(EventKind kind);  // "kernel", "autograd", "range"

// One finished event. Times are nanoseconds since start() on the host's steady clock.
struct ProfilerEvent {
  std::string name;
  EventKind kind = EventKind::Kernel;
  int64_t id = 0;
  int64_t parent = -1;  // the id of the event it ran inside on the same thread, -1 at top level
  int thread = 0;       // 0 for the first thread that recorded, 1 for the next, ...
  int depth = 0;        // how many events enclose it
  int64_t start_ns = 0, end_ns = 0;
  Device device = kCPU;       // kernels: the device of their tensor arguments
  std::vector<Shape> shapes;  // kernels: every defined tensor argument, outputs included
  std::vector<DType> dtypes;
  int64_t cuda_start_ns = -1, cuda_end_ns = -1;  // CUDA kernels: GPU time, on the host clock
  int64_t cuda_stream = 0;                       // CUDA kernels: a stream identifier
  int64_t self_allocated_bytes = 0;              // allocated while this was the innermost event
  int64_t self_freed_bytes = 0;
  int64_t sequence_nr = -1;  // autograd nodes: the forward op's tape position
  std::string forward_op;    // autograd nodes: the forward op's name ("linear")

  int64_t duration_ns() const { return end_ns - start_ns; }
  int64_t cuda_duration_ns() const { return cuda_start_ns < 0 ? 0 : cuda_end_ns - cuda_start_ns; }
};

// One sample of the memory timeline: bytes allocated on `device` after an allocation or free.
struct MemorySample {
  int64_t time_ns = 0;
  Device device = kCPU;
  int64_t allocated_bytes = 0;
};

// What one device's allocator held while profiling (bytes as the allocator counts them, i.e.
// requests rounded up to its block sizes).
struct DeviceMemory {
  Device device = kCPU;
  int64_t allocated_at_start = 0;
  int64_t allocated_at_stop = 0;
  int64_t peak_allocated = 0;   // the allocator's peak during profiling
  int64_t total_allocated = 0;  // sums over the session
  int64_t total_freed = 0;
  int64_t allocations = 0, frees = 0;
};

// Throws tapegrad::Error naming `path` when a trace could not be written there (its directory is
// missing or not writable, or it is a directory); creates and removes a temporary file beside it,
// leaving `path` itself untouched.
void check_trace_path(const std::string& path);

class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {}, bool start_now = false);
  ~Profiler();  // stops a running session; never throws
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Throws tapegrad::Error if this profiler or another one is running.
  void start();
  // Ends the session and reads back the CUDA timings (this waits for the GPU once). Throws
  // tapegrad::Error if this profiler is not running.
  void stop();
  bool running() const { return running_; }

  // The finished events of the last session, ordered by start time (available after stop()).
  const std::vector<ProfilerEvent>& events() const { return events_; }
  const std::vector<MemorySample>& memory_timeline() const { return memory_; }
  const std::vector<DeviceMemory>& device_memory() const { return devices_; }

  // Per-name (or per name and input shapes) totals, like PyTorch's key_averages().
  KeyAverages key_averages(bool group_by_input_shape = false) const;

  // Chrome trace event JSON (Perfetto, chrome://tracing): CPU threads and CUDA streams on separate
  // tracks, events nested as they ran, memory as counter tracks. Throws tapegrad::Error naming the
  // path if it cannot be written, or if the profiler is still running. The file is written whole
  // through a temporary file renamed over `path` (a failed export leaves the old file; a symlinked
  // path is written through); names that are not valid UTF-8 get U+FFFD for each invalid byte.
  void export_chrome_trace(const std::string& path) const;
  std::string chrome_trace_json() const;

 private:
  ProfilerOptions options_;
  bool running_ = false;
  int64_t session_ = 0;
  std::vector<ProfilerEvent> events_;
  std::vector<MemorySample> memory_;
  std::vector<DeviceMemory> devices_;
};

}  // namespace tapegrad::profiler
