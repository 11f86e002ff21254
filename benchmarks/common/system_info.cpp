// Machine description for benchmark reports.
#include "system_info.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tapegrad/tapegrad.h"

// OpenBLAS's own description of itself (both are part of its public C interface).
extern "C" char* openblas_get_config();
extern "C" char* openblas_get_corename();

namespace tapegrad::bench {

namespace {

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

std::string env_or_unset(const char* name) {
  const char* value = std::getenv(name);
  return std::string(name) + "=" + (value ? value : "unset");
}

// Paths of the mapped shared objects whose file name mentions blas, lapack or gomp.
std::string mapped_blas_libraries() {
  std::ifstream maps("/proc/self/maps");
  std::string line, out;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    std::string file = path.substr(path.rfind('/') + 1);
    bool wanted = file.find("blas") != std::string::npos || file.find("lapack") != std::string::npos ||
                  file.find("gomp") != std::string::npos;
    if (wanted && out.find(path) == std::string::npos) out += (out.empty() ? "" : ", ") + path;
  }
  return out.empty() ? "unknown" : out;
}

}  // namespace

SystemInfo system_info() {
  SystemInfo info;
  info.cpu_model = read_cpu_model();
  // Online CPUs, not this thread's affinity: with OMP_PROC_BIND the main thread is bound to one.
  info.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  info.blas = std::string("OpenBLAS ") + openblas_get_config() + " (core " + openblas_get_corename() + ")";
  info.loaded_blas = mapped_blas_libraries();
  info.threads = get_num_threads();
  info.omp_env =
      env_or_unset("OMP_NUM_THREADS") + " " + env_or_unset("OMP_PROC_BIND") + " " + env_or_unset("OMP_PLACES");
  info.cuda_available = cuda::is_available();
  info.cuda_devices = info.cuda_available ? cuda::device_count() : 0;
  return info;
}

std::string describe(const SystemInfo& info) {
  std::ostringstream out;
  out << "cpu: " << info.cpu_model << ", " << info.logical_cpus << " logical CPUs online\n";
  out << "blas: " << info.blas << "\n";
  out << "mapped blas/openmp libraries: " << info.loaded_blas << "\n";
  out << "threads: " << info.threads << " (" << info.omp_env << ")\n";
  out << "gpu: " << (info.cuda_available ? std::to_string(info.cuda_devices) + " CUDA device(s)" : "none found")
      << "\n";
  return out.str();
}

}  // namespace tapegrad::bench
