// How long two of this process's OpenMP threads take to pass a value back and forth: a reading of
// where the threads sit at the moment, taken beside a timing so that the timing can be labelled.
// On a virtual machine the vCPUs move between the host's cores: on the 2-vCPU Zen 5 machine of
// docs/benchmarks.md a round trip took 50-120 ns while the two shared a CCD (one L3) and 470-560 ns
// while they did not, and every step that shares data between the threads was 10-50% slower in the
// second state (lstm_small:1, mlp_fashion:64), so a before/after pair means something only within
// one state.
#pragma once

namespace tapegrad::bench {

// Median round trip in ns between OpenMP threads 0 and 1 over a few short runs of ping-pong; 0 when
// fewer than two threads or two CPUs are available (on one CPU each round trip would wait for the
// scheduler).
double core_exchange_ns();

// "one L3" below kSharedCacheMaxNs, "two L3s" above (the states of the machine above), "" for 0.
const char* core_exchange_state(double ns);
constexpr double kSharedCacheMaxNs = 200.0;

}  // namespace tapegrad::bench
