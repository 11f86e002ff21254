// User ranges: a profiler event and, in a CUDA build, an NVTX range.
#include "tapegrad/profiler/range.h"

#include "profiler/record.h"

namespace tapegrad::profiler {

Range::Range(const std::string& name) {
  open(name.c_str());
}
Range::Range(const char* name) {
  open(name);
}

void Range::open(const char* name) {
  detail::nvtx_push(name);
  if (detail::active()) token_ = detail::open_event(name, EventKind::Range);
}

Range::~Range() {
  if (token_ >= 0) detail::close_event(token_);
  detail::nvtx_pop();
}

}  // namespace tapegrad::profiler
