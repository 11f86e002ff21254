// key_averages(): per-key sums over the events of a session, and their text table.
#include "tapegrad/profiler/key_averages.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "tapegrad/core/error.h"
#include "tapegrad/profiler/profiler.h"

namespace tapegrad::profiler {

namespace {

std::string shapes_string(const ProfilerEvent& e) {
  std::string s = "[";
  for (size_t i = 0; i < e.shapes.size(); ++i) s += (i ? ", " : "") + shape_str(e.shapes[i]);
  return s + "]";
}

// As PyTorch prints times: "812.000us", "3.104ms", "1.250s".
std::string format_time(double ns) {
  char buf[32];
  if (ns >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3fs", ns / 1e9);
  else if (ns >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3fms", ns / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3fus", ns / 1e3);
  return buf;
}

std::string format_percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

// As PyTorch prints memory: "512 b", "-1.50 Kb", "3.06 Mb", "1.20 Gb".
std::string format_memory(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes), a = std::abs(b);
  if (a >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f Gb", b / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f Mb", b / (1024.0 * 1024));
  else if (a >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f Kb", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld b", static_cast<long long>(bytes));
  return buf;
}

}  // namespace

KeyAverages::KeyAverages(const std::vector<ProfilerEvent>& events, bool group_by_input_shape)
    : by_shape_(group_by_input_shape) {
  std::unordered_map<int64_t, size_t> by_id;
  for (size_t i = 0; i < events.size(); ++i) by_id[events[i].id] = i;
  std::vector<std::string> keys(events.size());
  std::vector<int64_t> child_ns(events.size(), 0), total_memory(events.size(), 0);
  for (size_t i = 0; i < events.size(); ++i) {
    keys[i] = events[i].name;
    if (by_shape_) keys[i] += '\n' + shapes_string(events[i]);
    total_memory[i] = events[i].self_allocated_bytes - events[i].self_freed_bytes;
  }
  // Children before parents: deepest first, so each total is complete before it is passed up.
  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return events[a].depth > events[b].depth; });
  for (size_t i : order) {
    auto parent = by_id.find(events[i].parent);
    if (parent == by_id.end()) continue;
    child_ns[parent->second] += events[i].duration_ns();
    total_memory[parent->second] += total_memory[i];
  }

  std::unordered_map<std::string, size_t> row_of;
  for (size_t i = 0; i < events.size(); ++i) {
    const ProfilerEvent& e = events[i];
    auto [it, fresh] = row_of.emplace(keys[i], rows_.size());
    if (fresh) {
      KeyAverage row;
      row.name = e.name;
      row.kind = event_kind_name(e.kind);
      if (by_shape_) row.input_shapes = shapes_string(e);
      rows_.push_back(row);
    }
    KeyAverage& row = rows_[it->second];
    const int64_t self_ns = std::max<int64_t>(0, e.duration_ns() - child_ns[i]);
    row.calls += 1;
    row.self_cpu_ns += self_ns;
    row.self_memory_bytes += e.self_allocated_bytes - e.self_freed_bytes;
    row.cuda_total_ns += e.cuda_duration_ns();
    any_cuda_ = any_cuda_ || e.cuda_start_ns >= 0;
    self_cpu_sum_ns_ += self_ns;
    // Inside another event of the same key, this one's time is in that one's total already.
    bool nested_in_same = false;
    for (auto p = by_id.find(e.parent); p != by_id.end(); p = by_id.find(events[p->second].parent)) {
      if (keys[p->second] == keys[i]) {
        nested_in_same = true;
        break;
      }
    }
    if (!nested_in_same) {
      row.cpu_total_ns += e.duration_ns();
      row.total_memory_bytes += total_memory[i];
    }
  }
}

const KeyAverage& KeyAverages::at(const std::string& name) const {
  for (const KeyAverage& row : rows_)
    if (row.name == name) return row;
  throw Error("profiler::KeyAverages::at: no event named '" + name + "' was recorded");
}

bool KeyAverages::contains(const std::string& name) const {
  for (const KeyAverage& row : rows_)
    if (row.name == name) return true;
  return false;
}

std::vector<KeyAverage> KeyAverages::sorted(SortBy sort_by) const {
  std::vector<KeyAverage> rows = rows_;
  auto value = [sort_by](const KeyAverage& r) -> int64_t {
    switch (sort_by) {
      case SortBy::SelfCpu:
        return r.self_cpu_ns;
      case SortBy::CpuTotal:
        return r.cpu_total_ns;
      case SortBy::CudaTotal:
        return r.cuda_total_ns;
      case SortBy::Calls:
        return r.calls;
      case SortBy::SelfMemory:
        return r.self_memory_bytes;
      case SortBy::Name:
        return 0;
    }
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const KeyAverage& a, const KeyAverage& b) {
    if (value(a) != value(b)) return value(a) > value(b);
    if (a.name != b.name) return a.name < b.name;
    return a.input_shapes < b.input_shapes;
  });
  return rows;
}

std::string KeyAverages::table(SortBy sort_by, size_t row_limit) const {
  std::vector<KeyAverage> rows = sorted(sort_by);
  if (row_limit > 0 && rows.size() > row_limit) rows.resize(row_limit);
  std::vector<std::string> header = {"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
  if (any_cuda_) header.insert(header.end(), {"CUDA total", "CUDA time avg"});
  header.insert(header.end(), {"Self Mem", "Total Mem", "# of Calls"});
  if (by_shape_) header.push_back("Input Shapes");
  std::vector<std::vector<std::string>> cells;
  for (const KeyAverage& r : rows) {
    std::vector<std::string> line = {
        r.name,
        format_percent(static_cast<double>(r.self_cpu_ns), static_cast<double>(self_cpu_sum_ns_)),
        format_time(static_cast<double>(r.self_cpu_ns)),
        format_percent(static_cast<double>(r.cpu_total_ns), static_cast<double>(self_cpu_sum_ns_)),
        format_time(static_cast<double>(r.cpu_total_ns)),
        format_time(r.cpu_average_ns())};
    if (any_cuda_)
      line.insert(line.end(), {format_time(static_cast<double>(r.cuda_total_ns)), format_time(r.cuda_average_ns())});
    line.insert(line.end(),
                {format_memory(r.self_memory_bytes), format_memory(r.total_memory_bytes), std::to_string(r.calls)});
    if (by_shape_) line.push_back(r.input_shapes);
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& line : cells) width[c] = std::max(width[c], line[c].size());
  }
  const size_t name_width = std::min<size_t>(width[0], 40);
  width[0] = name_width;
  std::string rule, out;
  for (size_t c = 0; c < header.size(); ++c) rule += std::string(width[c], '-') + (c + 1 < header.size() ? "  " : "\n");
  auto emit = [&](const std::vector<std::string>& line) {
    for (size_t c = 0; c < line.size(); ++c) {
      std::string cell = line[c];
      if (c == 0 && cell.size() > name_width) cell = cell.substr(0, name_width - 3) + "...";
      const std::string pad(width[c] > cell.size() ? width[c] - cell.size() : 0, ' ');
      // Names and shapes left-aligned, numbers right-aligned.
      const bool left = c == 0 || (by_shape_ && c + 1 == line.size());
      out += left ? cell + pad : pad + cell;
      out += c + 1 < line.size() ? "  " : "\n";
    }
  };
  out += rule;
  emit(header);
  out += rule;
  for (const auto& line : cells) emit(line);
  out += rule;
  out += "Self CPU time total: " + format_time(static_cast<double>(self_cpu_sum_ns_)) + "\n";
  return out;
}

}  // namespace tapegrad::profiler
