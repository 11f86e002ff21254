// Whole training steps of the named configurations (forward, cross-entropy, backward, Adam step;
// data already on the device) at each of their batch sizes, on the CPU and, where present, CUDA.
// Batch-1 configurations also run on the CPU with 1 and with 2 threads (".../threads:N"), so that a
// second thread that makes a small step slower shows.
// Counters: examples/s, FLOP/s of the GEMMs alone (a floor on the work done), and what one step
// asks of the GPU: kernel launches, GEMMs, copies and host syncs per step (all 0 on the CPU).
#include <algorithm>

#include "device_timing.h"
#include "models/named_configs.h"

using namespace tapegrad;
using namespace tapegrad::bench;

int main(int argc, char** argv) {
  for (Device device : benchmark_devices()) {
    for (const NamedConfig& c : named_configs()) {
      for (int64_t batch : c.batch_sizes) {
        register_on("train_step/" + c.name + "/b" + std::to_string(batch), device,
                    [&c, batch](benchmark::State& state, Device dev) {
                      TrainingRun run(c.shape, batch, dev, /*seed=*/0, c.lr);
                      run.step();  // the first step allocates the optimiser state
                      const cuda::Counters per_step = step_counts(run);
                      time_loop(
                          state, dev, [&] { run.step(); }, 3, GpuClock::SynchronizedWallClock);
                      state.SetItemsProcessed(state.iterations() * batch);
                      // The iterations cycle through the pool, whose char_lstm batches differ in length.
                      set_flops(state,
                                mean_batch_gemm_flops_per_example(c.shape, run.batches()) * static_cast<double>(batch));
                      state.counters["launches"] = static_cast<double>(per_step.launches);
                      state.counters["gemms"] = static_cast<double>(per_step.gemms);
                      state.counters["copies"] = static_cast<double>(per_step.copies);
                      state.counters["host_syncs"] = static_cast<double>(per_step.host_syncs);
                    });
      }
    }
  }
  for (const NamedConfig& c : named_configs()) {
    if (std::find(c.batch_sizes.begin(), c.batch_sizes.end(), 1) == c.batch_sizes.end()) continue;
    for (int threads : {1, 2}) {
      register_on("train_step/" + c.name + "/b1/threads:" + std::to_string(threads), kCPU,
                  [&c, threads](benchmark::State& state, Device dev) {
                    const int saved = get_num_threads();
                    set_num_threads(threads);
                    TrainingRun run(c.shape, 1, dev, /*seed=*/0, c.lr);
                    run.step();
                    time_loop(
                        state, dev, [&] { run.step(); }, 3, GpuClock::SynchronizedWallClock);
                    set_num_threads(saved);
                    state.SetItemsProcessed(state.iterations());
                    set_flops(state, mean_batch_gemm_flops_per_example(c.shape, run.batches()));
                  });
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tapegrad_threads", std::to_string(get_num_threads()));
  benchmark::AddCustomContext("cuda", cuda::is_available() ? "available" : "no GPU found");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
