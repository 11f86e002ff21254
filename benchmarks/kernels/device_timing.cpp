// Per-device registration and timing for the Google Benchmark suites.
#include "device_timing.h"

#include "common/step_timer.h"
#include "models/named_configs.h"

namespace tapegrad::bench {

std::vector<Device> benchmark_devices() {
  std::vector<Device> devices = {kCPU};
  if (cuda::is_available()) devices.push_back(kCUDA);
  return devices;
}

benchmark::internal::Benchmark* register_on(const std::string& name, Device device,
                                            std::function<void(benchmark::State&, Device)> body) {
  const std::string full = name + "/" + device_kind_name(device.kind());
  auto* b = benchmark::RegisterBenchmark(full.c_str(), [body, device](benchmark::State& state) {
    try {
      body(state, device);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  });
  if (device.is_cuda()) {
    b->UseManualTime();
  } else {
    b->UseRealTime();
  }
  return b->Unit(benchmark::kMicrosecond);
}

void time_loop(benchmark::State& state, Device device, const std::function<void()>& work, int inner, GpuClock clock) {
  if (device.is_cpu()) {
    for (auto _ : state) work();
    return;
  }
  work();  // warm-up: first launches, library handles, allocator caches
  synchronize(device);
  cuda::Event start(true), stop(true);
  for (auto _ : state) {
    if (clock == GpuClock::Events) {
      start.record();
      for (int i = 0; i < inner; ++i) work();
      stop.record();
      state.SetIterationTime(start.elapsed_ms(stop) / 1e3 / inner);
    } else {
      Stopwatch watch;
      for (int i = 0; i < inner; ++i) work();
      synchronize(device);
      state.SetIterationTime(watch.seconds() / inner);
    }
  }
}

void set_flops(benchmark::State& state, double flops_per_call) {
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_call * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void set_bytes(benchmark::State& state, double bytes_per_call) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_call * static_cast<double>(state.iterations())));
}

}  // namespace tapegrad::bench
