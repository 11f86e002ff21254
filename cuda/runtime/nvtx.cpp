// NVTX ranges for profiler::Range, so Nsight Systems shows the user's ranges on the timeline.
// nvtx3 is header-only (it finds the tool's library at run time, if one is attached).
#if !defined(TAPEGRAD_CUDA_EMULATED) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define TG_HAVE_NVTX 1
#endif

namespace tapegrad::profiler::detail {

#ifdef TG_HAVE_NVTX
void nvtx_push(const char* name) {
  nvtxRangePushA(name);
}
void nvtx_pop() {
  nvtxRangePop();
}
#else
void nvtx_push(const char*) {}
void nvtx_pop() {}
#endif

}  // namespace tapegrad::profiler::detail
