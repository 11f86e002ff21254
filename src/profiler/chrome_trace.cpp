// The Chrome trace event format export (the JSON that Perfetto and chrome://tracing open): one
// complete ("X") event per profiler event, CPU threads under process 0 and CUDA streams under
// process 1, a flow arrow from each kernel launch to its GPU execution, and the memory timeline
// as counter ("C") tracks.
#include <map>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "tapegrad/core/error.h"
#include "tapegrad/profiler/profiler.h"

namespace tapegrad::profiler {

namespace {

using nlohmann::json;

constexpr int kCpuPid = 0;
constexpr int kCudaPid = 1;

double to_us(int64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

json metadata(const char* what, int pid, int tid, const std::string& name) {
  return json{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

json event_args(const ProfilerEvent& e) {
  json args = json::object();
  args["Device"] = e.device.str();
  if (!e.shapes.empty()) {
    json dims = json::array(), types = json::array();
    for (size_t i = 0; i < e.shapes.size(); ++i) {
      dims.push_back(e.shapes[i]);
      types.push_back(dtype_name(e.dtypes[i]));
    }
    args["Input Dims"] = std::move(dims);
    args["Input type"] = std::move(types);
  }
  if (e.self_allocated_bytes) args["Self allocated bytes"] = e.self_allocated_bytes;
  if (e.self_freed_bytes) args["Self freed bytes"] = e.self_freed_bytes;
  if (e.sequence_nr >= 0) {
    args["Sequence number"] = e.sequence_nr;
    args["Forward op"] = e.forward_op;
  }
  return args;
}

}  // namespace

std::string Profiler::chrome_trace_json() const {
  TG_CHECK(!running_, "profiler::Profiler::export_chrome_trace: the profiler is still running (call stop() first)");
  json trace = json::array();
  trace.push_back(metadata("process_name", kCpuPid, 0, "CPU"));
  std::map<int, bool> threads;
  std::map<std::pair<int, int64_t>, int> streams;  // (device, stream) -> tid under kCudaPid
  for (const ProfilerEvent& e : events_) {
    if (!threads.count(e.thread)) {
      threads[e.thread] = true;
      trace.push_back(metadata("thread_name", kCpuPid, e.thread, "thread " + std::to_string(e.thread)));
    }
    trace.push_back(json{{"ph", "X"},
                         {"cat", event_kind_name(e.kind)},
                         {"name", e.name},
                         {"pid", kCpuPid},
                         {"tid", e.thread},
                         {"ts", to_us(e.start_ns)},
                         {"dur", to_us(e.duration_ns())},
                         {"args", event_args(e)}});
    if (e.cuda_start_ns < 0) continue;
    auto key = std::make_pair(e.device.index(), e.cuda_stream);
    auto stream = streams.find(key);
    if (stream == streams.end()) {
      const int tid = static_cast<int>(streams.size());
      stream = streams.emplace(key, tid).first;
      if (tid == 0) trace.push_back(metadata("process_name", kCudaPid, 0, "CUDA"));
      trace.push_back(
          metadata("thread_name", kCudaPid, tid,
                   e.device.str() + (e.cuda_stream == 0 ? " default stream" : " stream " + std::to_string(tid))));
    }
    trace.push_back(json{{"ph", "X"},
                         {"cat", "cuda_kernel"},
                         {"name", e.name},
                         {"pid", kCudaPid},
                         {"tid", stream->second},
                         {"ts", to_us(e.cuda_start_ns)},
                         {"dur", to_us(e.cuda_duration_ns())},
                         {"args", {{"Device", e.device.str()}, {"Launch id", e.id}}}});
    trace.push_back(json{{"ph", "s"},
                         {"cat", "launch"},
                         {"name", "launch"},
                         {"id", e.id},
                         {"pid", kCpuPid},
                         {"tid", e.thread},
                         {"ts", to_us(e.start_ns)}});
    trace.push_back(json{{"ph", "f"},
                         {"bp", "e"},
                         {"cat", "launch"},
                         {"name", "launch"},
                         {"id", e.id},
                         {"pid", kCudaPid},
                         {"tid", stream->second},
                         {"ts", to_us(e.cuda_start_ns)}});
  }
  for (const MemorySample& m : memory_)
    trace.push_back(json{{"ph", "C"},
                         {"name", "Memory (" + m.device.str() + ")"},
                         {"pid", m.device.is_cuda() ? kCudaPid : kCpuPid},
                         {"ts", to_us(m.time_ns)},
                         {"args", {{"allocated bytes", m.allocated_bytes}}}});
  json devices = json::array();
  for (const DeviceMemory& d : devices_)
    devices.push_back(json{{"device", d.device.str()},
                           {"allocated at start", d.allocated_at_start},
                           {"allocated at stop", d.allocated_at_stop},
                           {"peak allocated", d.peak_allocated},
                           {"total allocated", d.total_allocated},
                           {"total freed", d.total_freed}});
  json root = {{"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}, {"memory", std::move(devices)}};
  // Range names are the user's bytes: invalid UTF-8 becomes U+FFFD instead of an exception.
  return root.dump(-1, ' ', false, json::error_handler_t::replace);
}

void check_trace_path(const std::string& path) {
  detail::AtomicFileWriter probe("profiler::check_trace_path", path);  // removed uncommitted
}

void Profiler::export_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace_json();
  // Whole or not at all: an interrupted or failed export leaves the file that was there (a
  // symlinked path is written through); see Note [atomic output files] in io/atomic_file.h.
  detail::write_file_atomically("profiler::Profiler::export_chrome_trace", path, text);
}

}  // namespace tapegrad::profiler
