// What a benchmark table needs to say about the machine it was measured on: CPU model, BLAS,
// threads and the OpenMP settings, and the GPU when there is one.
#pragma once

#include <string>

namespace tapegrad::bench {

struct SystemInfo {
  std::string cpu_model;    // /proc/cpuinfo's "model name"
  int logical_cpus = 0;     // online CPUs
  std::string blas;         // OpenBLAS's build configuration and core type
  std::string loaded_blas;  // the BLAS and OpenMP libraries mapped into this process (shows what a
                            // second framework in the same process really calls)
  int threads = 0;          // tapegrad's CPU threads (our loops and OpenBLAS share them)
  std::string omp_env;      // OMP_NUM_THREADS, OMP_PROC_BIND, OMP_PLACES as set (or "unset")
  bool cuda_available = false;
  int cuda_devices = 0;
};

SystemInfo system_info();
// Lines "cpu: ...", "blas: ...", "threads: ... (OMP_...)" and "gpu: ...". Take it after every
// library of interest is loaded (the mapped BLAS list is read at the time of the call).
std::string describe(const SystemInfo& info);

}  // namespace tapegrad::bench
