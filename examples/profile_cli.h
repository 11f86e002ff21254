// The examples' profiling flags: --profile FILE profiles the run from the point the session is
// made to the end of main, writes a Chrome trace to FILE (open it in ui.perfetto.dev or
// chrome://tracing) and prints the summary table, sorted by --profile-sort, --profile-rows long.
// Keep the run short (--epochs 1 --limit N): every kernel of every step is one event.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <memory>
#include <string>

#include "cli_values.h"
#include "tapegrad/profiler/profiler.h"

namespace examples {

inline void add_profile_options(cxxopts::Options& cli) {
  cli.add_options()("profile", "profile the run: write a Chrome trace to this file and print the summary table",
                    cxxopts::value<std::string>()->default_value(""))(
      "profile-sort", "sort the summary by self_cpu, cpu_total, cuda_total, calls or self_memory",
      cxxopts::value<std::string>()->default_value("self_cpu"))("profile-rows", "rows of the summary table (0: all)",
                                                                cxxopts::value<std::string>()->default_value("20"));
}

inline tapegrad::profiler::SortBy parse_profile_sort(const std::string& text) {
  using tapegrad::profiler::SortBy;
  if (text == "self_cpu") return SortBy::SelfCpu;
  if (text == "cpu_total") return SortBy::CpuTotal;
  if (text == "cuda_total") return SortBy::CudaTotal;
  if (text == "calls") return SortBy::Calls;
  if (text == "self_memory") return SortBy::SelfMemory;
  throw UsageError("--profile-sort: '" + text + "' is not one of self_cpu, cpu_total, cuda_total, calls, self_memory");
}

// Under --distributed every rank profiles itself; ranks other than 0 write next to rank 0's file,
// "trace.json" -> "trace.rank1.json". The rank comes from the launcher's environment, which is set
// before MPI starts (Open MPI's OMPI_COMM_WORLD_RANK, or PMI_RANK of MPICH and Slurm).
inline std::string rank_path(const std::string& path, bool distributed) {
  if (path.empty() || !distributed) return path;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMI_RANK");
  if (rank == nullptr || std::string(rank) == "0") return path;
  const size_t dot = path.rfind('.'), slash = path.rfind('/');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return has_extension ? path.substr(0, dot) + ".rank" + rank + path.substr(dot) : path + ".rank" + rank;
}

// Profiles while it lives when --profile was given; does nothing otherwise.
class ProfileSession {
 public:
  explicit ProfileSession(const cxxopts::ParseResult& args)
      : path_(rank_path(args["profile"].as<std::string>(), args.count("distributed") > 0)),
        sort_(parse_profile_sort(args["profile-sort"].as<std::string>())),
        rows_(static_cast<size_t>(parse_int("profile-rows", args["profile-rows"].as<std::string>(), 0, 1 << 20))) {
    if (path_.empty()) return;
    // Fail now, not after the run, when the trace cannot be written, without touching the file:
    // the trace is written whole at the end (atomically), so an interrupted run (Ctrl-C) leaves
    // what was there before, never an empty or half-written trace.
    try {
      tapegrad::profiler::check_trace_path(path_);
    } catch (const tapegrad::Error& e) {
      throw UsageError(std::string("--profile: cannot open '") + path_ + "' for writing (" + e.what() + ")");
    }
    profiler_ = std::make_unique<tapegrad::profiler::Profiler>(tapegrad::profiler::ProfilerOptions{}, true);
  }

  ~ProfileSession() {
    if (!profiler_) return;
    try {
      profiler_->stop();
      profiler_->export_chrome_trace(path_);
      std::printf("\nprofile (sorted by %s):\n%s", sort_name(), profiler_->key_averages().table(sort_, rows_).c_str());
      for (const auto& m : profiler_->device_memory())
        std::printf("%s memory: peak %.2f MiB allocated (%.2f MiB at start)\n", m.device.str().c_str(),
                    static_cast<double>(m.peak_allocated) / (1 << 20),
                    static_cast<double>(m.allocated_at_start) / (1 << 20));
      std::printf("trace: %s (%zu events; open in ui.perfetto.dev or chrome://tracing)\n", path_.c_str(),
                  profiler_->events().size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "--profile: %s\n", e.what());
    }
  }

  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;

 private:
  const char* sort_name() const {
    switch (sort_) {
      case tapegrad::profiler::SortBy::CpuTotal:
        return "cpu_total";
      case tapegrad::profiler::SortBy::CudaTotal:
        return "cuda_total";
      case tapegrad::profiler::SortBy::Calls:
        return "calls";
      case tapegrad::profiler::SortBy::SelfMemory:
        return "self_memory";
      default:
        return "self_cpu";
    }
  }

  std::string path_;
  tapegrad::profiler::SortBy sort_;
  size_t rows_;
  std::unique_ptr<tapegrad::profiler::Profiler> profiler_;
};

}  // namespace examples
