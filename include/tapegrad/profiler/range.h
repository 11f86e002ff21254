// A named span of user code, e.g. profiler::Range r("data loading"): an event in the profiler's
// trace and table while a profiler runs (nested in whatever range is open on the thread), and in
// a CUDA build also an NVTX range, so Nsight Systems shows it. Costs one branch when no profiler
// runs (plus the NVTX push/pop in a CUDA build, which does nothing unless a tool is attached).
#pragma once

#include <cstdint>
#include <string>

namespace tapegrad::profiler {

class Range {
 public:
  explicit Range(const std::string& name);
  explicit Range(const char* name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void open(const char* name);
  int64_t token_ = -1;  // the open event, or -1 when no profiler was running
};

}  // namespace tapegrad::profiler
