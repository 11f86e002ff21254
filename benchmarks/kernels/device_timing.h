// Google Benchmark helpers: register a benchmark once per available device, and time its body the
// right way for that device. CPU: wall-clock time per iteration (UseRealTime, since the work runs
// on a thread pool). CUDA: a synchronising warm-up, then blocks of `inner` calls, reported as
// manual time per call, measured either by CUDA events around the block on the current stream
// (kernels: device time) or by a steady clock closed by a device synchronise (whole training
// steps, timed the same way as on the CPU).
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace tapegrad::bench {

// The CPU, plus the first GPU when one is present.
std::vector<Device> benchmark_devices();

// Registers "<name>/<device>" (e.g. "gemm/mlp_seed_fc1_b64/cuda") and returns it for ->Arg(...).
// An exception from the body (say, a kernel the CUDA backend lacks) skips that benchmark with the
// library's message instead of ending the run.
benchmark::internal::Benchmark* register_on(const std::string& name, Device device,
                                            std::function<void(benchmark::State&, Device)> body);

enum class GpuClock { Events, SynchronizedWallClock };

// Times `work` for every iteration of `state` on `device`.
void time_loop(benchmark::State& state, Device device, const std::function<void()>& work, int inner = 10,
               GpuClock clock = GpuClock::Events);

// Rate counters: FLOP/s and bytes/s per call, shown by Google Benchmark as e.g. "12.3G/s".
void set_flops(benchmark::State& state, double flops_per_call);
void set_bytes(benchmark::State& state, double bytes_per_call);

}  // namespace tapegrad::bench
