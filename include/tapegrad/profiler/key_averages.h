// The profiler's summary table, like PyTorch's prof.key_averages().table(): one row per event
// name (or per name and input shapes), with calls, total and self time and memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tapegrad::profiler {

struct ProfilerEvent;

// Totals for one key. "Self" excludes the time (or memory) of the events nested inside; "total"
// includes it. An event nested in another of the same key counts in that key's total once.
struct KeyAverage {
  std::string name;
  std::string kind;          // "kernel", "autograd" or "range"
  std::string input_shapes;  // "[[64, 784], [512, 784]]" when grouped by shape, else ""
  int64_t calls = 0;
  int64_t cpu_total_ns = 0;
  int64_t self_cpu_ns = 0;
  int64_t cuda_total_ns = 0;       // GPU time of the CUDA kernels of this key
  int64_t self_memory_bytes = 0;   // allocated minus freed while this was the innermost event
  int64_t total_memory_bytes = 0;  // the same including nested events

  double cpu_average_ns() const { return calls ? static_cast<double>(cpu_total_ns) / calls : 0.0; }
  double cuda_average_ns() const { return calls ? static_cast<double>(cuda_total_ns) / calls : 0.0; }
};

enum class SortBy { SelfCpu, CpuTotal, CudaTotal, Calls, SelfMemory, Name };

class KeyAverages {
 public:
  KeyAverages() = default;
  KeyAverages(const std::vector<ProfilerEvent>& events, bool group_by_input_shape);

  const std::vector<KeyAverage>& rows() const { return rows_; }
  // The row for `name` (first one when grouped by shape); throws tapegrad::Error if none.
  const KeyAverage& at(const std::string& name) const;
  bool contains(const std::string& name) const;
  // Sum of every event's self CPU time: the base of the percentages.
  int64_t self_cpu_sum_ns() const { return self_cpu_sum_ns_; }

  // Rows sorted by `sort_by` (largest first, names alphabetically), at most `row_limit` of them
  // (0: all), as a fixed-width text table.
  std::string table(SortBy sort_by = SortBy::SelfCpu, size_t row_limit = 0) const;
  std::vector<KeyAverage> sorted(SortBy sort_by) const;

 private:
  std::vector<KeyAverage> rows_;
  int64_t self_cpu_sum_ns_ = 0;
  bool by_shape_ = false;
  bool any_cuda_ = false;
};

}  // namespace tapegrad::profiler
