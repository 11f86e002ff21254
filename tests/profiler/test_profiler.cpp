// The profiler: the Chrome trace is valid JSON with properly nested events and the right names for
// an MLP's forward and backward; key_averages() counts a known sequence; ranges nest; memory of a
// known allocation; nothing is recorded while off; bad use gives a clear Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "backend/kernel_table.h"
#include "cpu/runtime/caching_allocator.h"
#include "support/test_util.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/ops/reduction.h"
#include "tapegrad/profiler/profiler.h"
#include "tapegrad/profiler/range.h"

using namespace tapegrad;
using nlohmann::json;
using tapegrad::testing::expect_error;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tapegrad_profiler_" + name)).string();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);  // throws on invalid JSON
}

// Every pair of complete events on one track either nests or is disjoint; returns the first
// offending pair's names, "" if none.
std::string nesting_violation(const json& events) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::map<std::pair<int, int>, std::vector<std::string>> names;
  for (const json& e : events) {
    if (e.at("ph") != "X") continue;
    auto key = std::make_pair(e.at("pid").get<int>(), e.at("tid").get<int>());
    tracks[key].push_back({e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()});
    names[key].push_back(e.at("name").get<std::string>());
  }
  for (auto& [key, spans] : tracks) {
    std::vector<size_t> order(spans.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return spans[a].first != spans[b].first ? spans[a].first < spans[b].first : spans[a].second > spans[b].second;
    });
    std::vector<size_t> open;
    for (size_t i : order) {
      while (!open.empty() && spans[open.back()].second <= spans[i].first) open.pop_back();
      if (!open.empty() && spans[i].second > spans[open.back()].second)
        return names[key][open.back()] + " / " + names[key][i];
      open.push_back(i);
    }
  }
  return "";
}

std::set<std::string> names_of(const json& events, const std::string& category) {
  std::set<std::string> names;
  for (const json& e : events)
    if (e.at("ph") == "X" && e.at("cat") == category) names.insert(e.at("name").get<std::string>());
  return names;
}

const profiler::ProfilerEvent* find_event(const std::vector<profiler::ProfilerEvent>& events, const std::string& name) {
  for (const auto& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

// One training step of Linear(8, 16) - ReLU - Linear(16, 4) with cross-entropy.
void mlp_step(nn::Sequential& model) {
  Tensor x = randn({5, 8});
  Tensor target = tensor<int64_t>({0, 1, 2, 3, 0}, {5});
  Tensor loss = cross_entropy(model.forward(x), target);
  loss.backward();
}

}  // namespace

TEST(Profiler, MlpTraceIsValidNestedJsonWithOpAndBackwardNames) {
  manual_seed(0);
  nn::Sequential model(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 4));
  profiler::Profiler prof;
  prof.start();
  {
    profiler::Range step("step");
    mlp_step(model);
  }
  prof.stop();
  const std::string path = temp_path("mlp.json");
  prof.export_chrome_trace(path);
  json trace = read_json(path);
  std::remove(path.c_str());
  const json& events = trace.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  EXPECT_EQ(nesting_violation(events), "");

  const std::set<std::string> kernels = names_of(events, "kernel");
  for (const char* name : {"gemm", "copy", "relu", "cross_entropy", "cross_entropy_backward", "relu_backward"})
    EXPECT_TRUE(kernels.count(name)) << "no kernel event " << name;
  const std::set<std::string> nodes = names_of(events, "autograd");
  for (const char* name : {"LinearBackward", "ReluBackward", "CrossEntropyBackward", "AccumulateGrad"})
    EXPECT_TRUE(nodes.count(name)) << "no autograd event " << name;
  EXPECT_EQ(names_of(events, "range"), std::set<std::string>{"step"});

  // Backward nodes name their forward op and its tape position; kernels carry their shapes.
  bool saw_linear_backward = false, saw_gemm_shapes = false;
  for (const json& e : events) {
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "LinearBackward") {
      saw_linear_backward = true;
      EXPECT_EQ(e.at("args").at("Forward op"), "linear");
      EXPECT_GE(e.at("args").at("Sequence number").get<int64_t>(), 0);
    }
    // linear's forward: the CPU's gemm_bias slot (the product with its bias) on the [5, 8] input
    if (e.at("name") == "gemm_bias" && e.at("args").at("Input Dims").at(0) == json::array({5, 8})) {
      saw_gemm_shapes = true;
      EXPECT_EQ(e.at("args").at("Input type").at(0), "float32");
      EXPECT_EQ(e.at("args").at("Device"), "cpu");
    }
  }
  EXPECT_TRUE(saw_linear_backward);
  EXPECT_TRUE(saw_gemm_shapes);

  // The gemms of backward run inside their node, which runs inside the user's range.
  const auto& recorded = prof.events();
  std::map<int64_t, const profiler::ProfilerEvent*> by_id;
  for (const auto& e : recorded) by_id[e.id] = &e;
  int backward_gemms = 0;
  for (const auto& e : recorded) {
    if (e.name != "gemm" || e.parent < 0) continue;
    const profiler::ProfilerEvent* parent = by_id.at(e.parent);
    if (parent->name == "LinearBackward") {
      ++backward_gemms;
      EXPECT_EQ(by_id.at(parent->parent)->name, "step");
      EXPECT_GE(e.start_ns, parent->start_ns);
      EXPECT_LE(e.end_ns, parent->end_ns);
    }
  }
  // dW and db (a GEMM with a ones vector) for both layers, dx for the second only (the input
  // needs no gradient).
  EXPECT_EQ(backward_gemms, 5);
}

TEST(Profiler, NestingCheckerCatchesOverlap) {
  // Negative control: two events on one track that overlap without nesting.
  json events = json::array({json{{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", 0.0}, {"dur", 10.0}, {"name", "a"}},
                             json{{"ph", "X"}, {"pid", 0}, {"tid", 0}, {"ts", 5.0}, {"dur", 10.0}, {"name", "b"}}});
  EXPECT_EQ(nesting_violation(events), "a / b");
  events[1]["dur"] = 5.0;
  EXPECT_EQ(nesting_violation(events), "");
}

TEST(Profiler, KeyAveragesCountAKnownSequence) {
  Tensor x = randn({4, 6}), y = randn({4, 6}), z = randn({3});
  profiler::Profiler prof;
  prof.start();
  {
    profiler::Range outer("outer");
    for (int i = 0; i < 3; ++i) relu(x);
    relu(z);
    for (int i = 0; i < 2; ++i) add(x, y);
  }
  prof.stop();
  profiler::KeyAverages averages = prof.key_averages();
  EXPECT_EQ(averages.at("relu").calls, 4);
  EXPECT_EQ(averages.at("add").calls, 2);
  EXPECT_EQ(averages.at("outer").calls, 1);
  EXPECT_FALSE(averages.contains("mul"));
  int64_t self_sum = 0;
  for (const auto& row : averages.rows()) {
    EXPECT_LE(row.self_cpu_ns, row.cpu_total_ns) << row.name;
    EXPECT_GE(row.self_cpu_ns, 0) << row.name;
    self_sum += row.self_cpu_ns;
  }
  EXPECT_EQ(self_sum, averages.self_cpu_sum_ns());
  // Every op ran inside "outer": its total covers them all, and self time adds up to it.
  const auto& outer = averages.at("outer");
  EXPECT_EQ(outer.cpu_total_ns, averages.self_cpu_sum_ns());
  EXPECT_GE(outer.cpu_total_ns, averages.at("relu").cpu_total_ns + averages.at("add").cpu_total_ns);
  // Grouped by input shape, relu splits into its two shapes.
  profiler::KeyAverages by_shape = prof.key_averages(true);
  int relu_rows = 0;
  for (const auto& row : by_shape.rows()) {
    if (row.name != "relu") continue;
    ++relu_rows;
    EXPECT_EQ(row.calls, row.input_shapes == "[[4, 6], [4, 6]]" ? 3 : 1) << row.input_shapes;
  }
  EXPECT_EQ(relu_rows, 2);

  const std::string table = averages.table(profiler::SortBy::Calls);
  EXPECT_NE(table.find("Self CPU %"), std::string::npos);
  EXPECT_NE(table.find("# of Calls"), std::string::npos);
  EXPECT_LT(table.find("relu"), table.find("add"));  // 4 calls before 2
  EXPECT_NE(by_shape.table().find("[[3], [3]]"), std::string::npos);
  // row_limit keeps the first rows only.
  const std::string one = averages.table(profiler::SortBy::Calls, 1);
  EXPECT_NE(one.find("relu"), std::string::npos);
  EXPECT_EQ(one.find("outer"), std::string::npos);
}

TEST(Profiler, SameNameNestedCountsTotalOnce) {
  profiler::Profiler prof;
  prof.start();
  {
    profiler::Range a("block");
    profiler::Range b("block");
  }
  prof.stop();
  const profiler::KeyAverages averages = prof.key_averages();  // kept: at() returns a reference into it
  const auto& row = averages.at("block");
  EXPECT_EQ(row.calls, 2);
  const auto& events = prof.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(row.cpu_total_ns, events[0].duration_ns());  // the outer one only
  EXPECT_LE(row.self_cpu_ns, row.cpu_total_ns);
}

TEST(Profiler, RangesNest) {
  profiler::Profiler prof;
  prof.start();
  {
    profiler::Range a("data loading");
    {
      profiler::Range b(std::string("decode"));
      profiler::Range c("resize");
    }
    profiler::Range d("batch");
  }
  prof.stop();
  const auto& events = prof.events();
  ASSERT_EQ(events.size(), 4u);
  const auto* a = find_event(events, "data loading");
  const auto* b = find_event(events, "decode");
  const auto* c = find_event(events, "resize");
  const auto* d = find_event(events, "batch");
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(a->parent, -1);
  EXPECT_EQ(b->parent, a->id);
  EXPECT_EQ(c->parent, b->id);
  EXPECT_EQ(d->parent, a->id);
  EXPECT_EQ(c->depth, 2);
  EXPECT_EQ(a->kind, profiler::EventKind::Range);
  EXPECT_LE(a->start_ns, b->start_ns);
  EXPECT_LE(c->end_ns, b->end_ns);
  EXPECT_LE(b->end_ns, d->start_ns);
  EXPECT_LE(d->end_ns, a->end_ns);
}

TEST(Profiler, ThreadsGetTheirOwnTracks) {
  profiler::Profiler prof(profiler::ProfilerOptions{}, /*start_now=*/true);
  { profiler::Range main_range("main"); }
  std::thread worker([] { profiler::Range r("worker"); });
  worker.join();
  prof.stop();
  const auto* main_event = find_event(prof.events(), "main");
  const auto* worker_event = find_event(prof.events(), "worker");
  ASSERT_TRUE(main_event && worker_event);
  EXPECT_NE(main_event->thread, worker_event->thread);
  EXPECT_EQ(worker_event->parent, -1);
}

TEST(Profiler, MemoryOfAKnownAllocation) {
  const int64_t n = 1000;  // 4000 bytes of float32
  const int64_t block = static_cast<int64_t>(cpu::cpu_allocation_size(n * 4));
  profiler::Profiler prof;
  prof.start();
  {
    Tensor t;
    {
      profiler::Range r("allocate");
      t = empty({n});
    }
    profiler::Range r("free");
    t = Tensor();
  }
  prof.stop();
  const auto* allocate = find_event(prof.events(), "allocate");
  const auto* free = find_event(prof.events(), "free");
  ASSERT_TRUE(allocate && free);
  EXPECT_EQ(allocate->self_allocated_bytes, block);
  EXPECT_EQ(allocate->self_freed_bytes, 0);
  EXPECT_EQ(free->self_allocated_bytes, 0);
  EXPECT_EQ(free->self_freed_bytes, block);
  profiler::KeyAverages averages = prof.key_averages();
  EXPECT_EQ(averages.at("allocate").self_memory_bytes, block);
  EXPECT_EQ(averages.at("free").self_memory_bytes, -block);

  // One entry per device (the CPU, and every GPU where there are some).
  ASSERT_EQ(prof.device_memory().size(), 1u + static_cast<size_t>(cuda::device_count()));
  const profiler::DeviceMemory& cpu = prof.device_memory()[0];
  ASSERT_EQ(cpu.device, kCPU);
  EXPECT_EQ(cpu.total_allocated, block);
  EXPECT_EQ(cpu.total_freed, block);
  EXPECT_EQ(cpu.allocations, 1);
  EXPECT_EQ(cpu.frees, 1);
  EXPECT_EQ(cpu.allocated_at_stop, cpu.allocated_at_start);
  EXPECT_EQ(cpu.peak_allocated, cpu.allocated_at_start + block);
  ASSERT_EQ(prof.memory_timeline().size(), 2u);
  EXPECT_EQ(prof.memory_timeline()[0].allocated_bytes, cpu.allocated_at_start + block);
}

TEST(Profiler, MemoryTotalIncludesNestedEvents) {
  profiler::Profiler prof;
  prof.start();
  Tensor kept;
  {
    profiler::Range outer("outer");
    kept = add(randn({256}), 1.0);  // allocations inside kernels and ops nested in "outer"
  }
  prof.stop();
  const profiler::KeyAverages averages = prof.key_averages();
  const auto& row = averages.at("outer");
  // What is still alive after the range: kept's 1 KiB block (randn's input was freed inside).
  EXPECT_EQ(row.total_memory_bytes, static_cast<int64_t>(cpu::cpu_allocation_size(256 * 4)));
}

TEST(Profiler, OffRecordsNothing) {
  // While no profiler runs the ops see the registered table itself.
  EXPECT_EQ(&backend::kernels(DeviceKind::CPU), &backend::registered_kernels(DeviceKind::CPU));
  Tensor x = randn({4, 4});
  profiler::Profiler prof;
  relu(x);  // before start
  { profiler::Range r("before"); }
  prof.start();
  EXPECT_NE(&backend::kernels(DeviceKind::CPU), &backend::registered_kernels(DeviceKind::CPU));
  add(x, x);
  prof.stop();
  relu(x);  // after stop
  { profiler::Range r("after"); }
  EXPECT_EQ(&backend::kernels(DeviceKind::CPU), &backend::registered_kernels(DeviceKind::CPU));
  ASSERT_EQ(prof.events().size(), 1u);
  EXPECT_EQ(prof.events()[0].name, "add");
  // Negative control for the line above: the profiler does see relu when it runs.
  prof.start();
  relu(x);
  prof.stop();
  ASSERT_EQ(prof.events().size(), 1u);
  EXPECT_EQ(prof.events()[0].name, "relu");
}

TEST(Profiler, OptionsTurnOffShapesAndMemory) {
  profiler::ProfilerOptions options;
  options.record_shapes = false;
  options.profile_memory = false;
  profiler::Profiler prof(options);
  prof.start();
  Tensor y = relu(randn({8}));
  prof.stop();
  const auto* relu_event = find_event(prof.events(), "relu");
  ASSERT_TRUE(relu_event);
  EXPECT_TRUE(relu_event->shapes.empty());
  EXPECT_TRUE(prof.memory_timeline().empty());
  for (const auto& e : prof.events()) EXPECT_EQ(e.self_allocated_bytes, 0) << e.name;
}

TEST(Profiler, RangeOpenAcrossStopIsDropped) {
  profiler::Profiler prof;
  prof.start();
  auto range = std::make_unique<profiler::Range>("spans stop");
  prof.stop();
  range.reset();  // closes after the session ended
  EXPECT_TRUE(prof.events().empty());
  prof.start();
  { profiler::Range r("next"); }
  prof.stop();
  ASSERT_EQ(prof.events().size(), 1u);
  EXPECT_EQ(prof.events()[0].depth, 0);
}

TEST(Profiler, BadUseIsAClearError) {
  profiler::Profiler prof;
  expect_error([&] { prof.stop(); }, {"profiler::Profiler::stop", "not running"});
  prof.start();
  expect_error([&] { prof.start(); }, {"profiler::Profiler::start", "already running"});
  {
    profiler::Profiler other;
    expect_error([&] { other.start(); }, {"profiler::Profiler::start", "another profiler"});
  }
  expect_error([&] { prof.export_chrome_trace(temp_path("running.json")); }, {"still running"});
  expect_error([&] { prof.key_averages(); }, {"still running"});
  prof.stop();
  const std::string bad = "/nonexistent_tapegrad_dir/trace.json";
  expect_error([&] { prof.export_chrome_trace(bad); }, {"export_chrome_trace", bad});
  expect_error([&] { prof.key_averages().at("nothing"); }, {"no event named 'nothing'"});
}

TEST(Profiler, BackwardEventNames) {
  // The node names of the tape, as PyTorch names its backward functions.
  profiler::Profiler prof(profiler::ProfilerOptions{}, true);
  Tensor w = randn({3}).requires_grad_();
  Tensor loss = sum(mul(relu(w), w));
  loss.backward();
  prof.stop();
  std::set<std::string> autograd;
  for (const auto& e : prof.events())
    if (e.kind == profiler::EventKind::Autograd) autograd.insert(e.name);
  EXPECT_TRUE(autograd.count("SumBackward")) << ::testing::PrintToString(autograd);
  EXPECT_TRUE(autograd.count("MulBackward"));
  EXPECT_TRUE(autograd.count("ReluBackward"));
  EXPECT_TRUE(autograd.count("AccumulateGrad"));
}

TEST(Profiler, OutputMemoryGoesToTheKernelThatFillsIt) {
  Tensor x = randn({1000});
  const int64_t block = static_cast<int64_t>(cpu::cpu_allocation_size(1000 * 4));
  profiler::Profiler prof;
  prof.start();
  Tensor y;
  {
    profiler::Range r("forward");
    y = relu(x);  // allocates y, then dispatches the relu kernel into it
  }
  prof.stop();
  const auto* relu_event = find_event(prof.events(), "relu");
  const auto* range = find_event(prof.events(), "forward");
  ASSERT_TRUE(relu_event && range);
  EXPECT_EQ(relu_event->self_allocated_bytes, block);
  EXPECT_EQ(range->self_allocated_bytes, 0);  // moved, not counted twice
  EXPECT_EQ(prof.key_averages().at("forward").total_memory_bytes, block);
}

// Hardening: a range name that is not valid UTF-8 made export_chrome_trace throw the JSON
// library's exception and write nothing.
TEST(Profiler, InvalidUtf8NamesStillExport) {
  profiler::Profiler prof;
  prof.start();
  { profiler::Range r("step \xff\xfe"); }
  prof.stop();
  const std::string path = temp_path("utf8.json");
  prof.export_chrome_trace(path);
  std::ifstream in(path);
  const json trace = json::parse(in);
  bool found = false;
  for (const json& e : trace["traceEvents"]) found |= e.value("name", "") == "step \xEF\xBF\xBD\xEF\xBF\xBD";
  EXPECT_TRUE(found);
  std::remove(path.c_str());
}

// The trace is written through a symlinked path (the link stays) and never into a directory.
TEST(Profiler, TraceThroughASymlinkStaysALink) {
  profiler::Profiler prof;
  prof.start();
  { profiler::Range r("step"); }
  prof.stop();
  const std::filesystem::path dir = temp_path("trace_link_dir");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "real");
  std::filesystem::create_symlink("real/trace.json", dir / "trace.json");
  prof.export_chrome_trace((dir / "trace.json").string());
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "trace.json"));
  std::ifstream in(dir / "real/trace.json");
  EXPECT_FALSE(json::parse(in)["traceEvents"].empty());
  expect_error([&] { prof.export_chrome_trace((dir / "real").string()); }, {"export_chrome_trace", "directory"});
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "real"), {}), 1);  // no temporary left
  std::filesystem::remove_all(dir);
}
