// The profiler on CUDA: kernels on a GPU tensor get a GPU time from CUDA events (read back at
// stop(), inside their host span's order), the trace puts them on a CUDA track apart from the CPU
// threads, the CUDA allocator's blocks are counted, and the CPU kernels of the same session have
// no GPU time (the negative control). The cases skip where no GPU is present and run on the
// emulated one.
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "support/gpu.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

TEST(CudaProfiler, KernelsGetGpuTimesAndACudaTrack) {
  SKIP_WITHOUT_GPU();
  Tensor a = randn({64, 32}).to(kCUDA), b = randn({32, 16}).to(kCUDA), c = randn({8, 8});
  profiler::Profiler prof;
  prof.start();
  Tensor y = relu(mm(a, b));
  Tensor z = relu(c);  // on the CPU
  prof.stop();
  int cuda_kernels = 0, cpu_kernels = 0;
  for (const profiler::ProfilerEvent& e : prof.events()) {
    if (e.kind != profiler::EventKind::Kernel) continue;
    if (e.device.is_cuda()) {
      ++cuda_kernels;
      EXPECT_GE(e.cuda_start_ns, 0) << e.name;
      EXPECT_GE(e.cuda_end_ns, e.cuda_start_ns) << e.name;
    } else {
      ++cpu_kernels;
      EXPECT_EQ(e.cuda_start_ns, -1) << e.name;  // no GPU time for a CPU kernel
    }
  }
  EXPECT_GE(cuda_kernels, 2);  // the gemm and the relu at least
  EXPECT_GE(cpu_kernels, 1);
  bool cuda_memory = false;
  for (const profiler::DeviceMemory& m : prof.device_memory())
    if (m.device.is_cuda()) cuda_memory = cuda_memory || m.total_allocated > 0;
  EXPECT_TRUE(cuda_memory) << "the CUDA allocator's blocks were not counted";

  // The trace: the CUDA kernels on tracks of their own, named apart from the CPU threads'.
  const nlohmann::json trace = nlohmann::json::parse(prof.chrome_trace_json());
  std::set<std::string> cpu_tracks, gpu_tracks;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string track = std::to_string(e["pid"].get<int64_t>()) + "/" + std::to_string(e["tid"].get<int64_t>());
    const std::string category = e.value("cat", "");
    (category.find("cuda") != std::string::npos || category.find("gpu") != std::string::npos ? gpu_tracks : cpu_tracks)
        .insert(track);
  }
  EXPECT_FALSE(gpu_tracks.empty()) << trace.dump().substr(0, 2000);
  for (const std::string& t : gpu_tracks) EXPECT_EQ(cpu_tracks.count(t), 0u) << "a CUDA event on a CPU track " << t;
}

}  // namespace
}  // namespace tapegrad
