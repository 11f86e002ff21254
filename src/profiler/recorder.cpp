// The profiler's session state and recording hooks (Note [profiler events] in record.h).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include "backend/allocator_stats.h"
#include "profiler/record.h"
#include "tapegrad/core/error.h"
#include "tapegrad/cuda/device.h"
#include "tapegrad/cuda/memory.h"

namespace tapegrad::profiler::detail {

std::atomic<bool> g_active{false};

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int device_key(Device d) {
  return static_cast<int>(d.kind()) * 4096 + d.index();
}

struct PendingCuda {
  int64_t event_id;
  int device;
  cuda::Event start, end;
};

// A device's reference point: an event that completed at host time host_ns (since the origin),
// so GPU intervals measured from it land on the host clock.
struct CudaBase {
  cuda::Event event{true};
  int64_t host_ns = 0;
};

struct Session {
  std::mutex mutex;
  std::atomic<int64_t> id{0};
  int64_t origin_ns = 0;
  ProfilerOptions options;
  std::atomic<int64_t> next_event{0};
  std::atomic<int> next_thread{0};
  std::vector<ProfilerEvent> finished;
  std::vector<MemorySample> memory;
  std::unordered_map<int, DeviceMemory> devices;
  std::vector<PendingCuda> cuda;
  std::unordered_map<int, CudaBase> cuda_bases;
};

Session& session() {
  static Session* s = new Session();  // never destroyed: threads may close events at exit
  return *s;
}

// Note [output memory]: an op allocates its outputs before it dispatches the kernel that fills
// them, so an allocation is first counted to the enclosing event and kept as pending; a kernel
// dispatched at that level which takes the block as an argument claims it (claim_allocation).
constexpr size_t kMaxPending = 64;
struct PendingBlock {
  const void* ptr;
  int64_t bytes;
};
struct ThreadState {
  int64_t session = -1;
  int thread = 0;
  std::vector<ProfilerEvent> stack;
  std::vector<PendingBlock> pending;
  int64_t pending_owner = -1;  // the innermost event when they were allocated (-1: none)
};
thread_local ThreadState t_state;

// The calling thread's state for the running session (reset when a new session began).
ThreadState* thread_state() {
  Session& s = session();
  const int64_t id = s.id.load(std::memory_order_acquire);
  if (t_state.session != id) {
    t_state.session = id;
    t_state.thread = s.next_thread.fetch_add(1);
    t_state.stack.clear();
    t_state.pending.clear();
  }
  return &t_state;
}

int64_t allocator_bytes(Device d) {
  if (d.is_cpu()) return backend::allocated_bytes(d);
  return static_cast<int64_t>(cuda::memory_stats(d.index()).allocated_bytes);
}

}  // namespace

const ProfilerOptions& session_options() {
  return session().options;
}

int64_t open_event(std::string name, EventKind kind) {
  if (!g_active.load(std::memory_order_acquire)) return -1;
  Session& s = session();
  ThreadState* t = thread_state();
  ProfilerEvent e;
  e.name = std::move(name);
  e.kind = kind;
  e.id = s.next_event.fetch_add(1);
  e.parent = t->stack.empty() ? -1 : t->stack.back().id;
  e.thread = t->thread;
  e.depth = static_cast<int>(t->stack.size());
  e.start_ns = steady_ns() - s.origin_ns;
  t->stack.push_back(std::move(e));
  return t->stack.back().id;
}

ProfilerEvent* open_event_data(int64_t token) {
  if (token < 0 || t_state.stack.empty() || t_state.stack.back().id != token) return nullptr;
  return &t_state.stack.back();
}

void close_event(int64_t token) {
  ThreadState& t = t_state;
  if (t.stack.empty() || t.stack.back().id != token) return;  // opened in an earlier session
  Session& s = session();
  ProfilerEvent e = std::move(t.stack.back());
  t.stack.pop_back();
  if (t.pending_owner == e.id) t.pending.clear();
  e.end_ns = steady_ns() - s.origin_ns;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (g_active.load(std::memory_order_relaxed) && s.id.load(std::memory_order_relaxed) == t.session)
    s.finished.push_back(std::move(e));
}

void add_cuda_timing(int64_t token, int device, const cuda::Event& start, const cuda::Event& end) {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (g_active.load(std::memory_order_relaxed)) s.cuda.push_back(PendingCuda{token, device, start, end});
}

namespace {

void note_memory_unchecked(Device device, int64_t delta, const void* ptr) {
  Session& s = session();
  if (!s.options.profile_memory) return;
  ThreadState* t = thread_state();
  if (!t->stack.empty()) {
    if (delta > 0)
      t->stack.back().self_allocated_bytes += delta;
    else
      t->stack.back().self_freed_bytes -= delta;
  }
  if (ptr != nullptr) {
    if (delta > 0) {
      const int64_t owner = t->stack.empty() ? -1 : t->stack.back().id;
      if (owner != t->pending_owner) t->pending.clear();
      if (t->pending.size() == kMaxPending) t->pending.erase(t->pending.begin());
      t->pending_owner = owner;
      t->pending.push_back(PendingBlock{ptr, delta});
    } else {
      for (auto it = t->pending.begin(); it != t->pending.end(); ++it)
        if (it->ptr == ptr) {
          t->pending.erase(it);
          break;
        }
    }
  }
  const int64_t now = steady_ns() - s.origin_ns;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!g_active.load(std::memory_order_relaxed)) return;
  auto it = s.devices.find(device_key(device));
  if (it == s.devices.end()) return;  // a device that appeared after start()
  DeviceMemory& m = it->second;
  m.allocated_at_stop += delta;
  m.peak_allocated = std::max(m.peak_allocated, m.allocated_at_stop);
  if (delta > 0) {
    m.total_allocated += delta;
    ++m.allocations;
  } else {
    m.total_freed -= delta;
    ++m.frees;
  }
  s.memory.push_back(MemorySample{now, device, m.allocated_at_stop});
}

}  // namespace

void note_memory(Device device, int64_t delta, const void* ptr) noexcept {
  if (!g_active.load(std::memory_order_acquire) || delta == 0) return;
  try {
    note_memory_unchecked(device, delta, ptr);
  } catch (...) {
    // Called from deleters, which must not throw: a sample lost to a failed allocation is dropped.
  }
}

void claim_allocation(int64_t token, const void* ptr) {
  ThreadState& t = t_state;
  if (ptr == nullptr || t.pending.empty() || t.stack.empty() || t.stack.back().id != token) return;
  ProfilerEvent& e = t.stack.back();
  if (t.pending_owner != e.parent) return;
  for (auto it = t.pending.begin(); it != t.pending.end(); ++it) {
    if (it->ptr != ptr) continue;
    e.self_allocated_bytes += it->bytes;
    if (t.stack.size() > 1) t.stack[t.stack.size() - 2].self_allocated_bytes -= it->bytes;
    t.pending.erase(it);
    return;
  }
}

std::string backward_event_name(const std::string& node_name) {
  if (node_name.empty() || std::isupper(static_cast<unsigned char>(node_name[0]))) return node_name;
  std::string out;
  bool upper = true;
  for (char c : node_name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out + "Backward";
}

int64_t begin_session(const ProfilerOptions& options) {
  prepare_profiled_kernels();  // outside the lock: the first call registers the backends
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  TG_CHECK(!g_active.load(), "profiler::Profiler::start: another profiler is already running (one at a time)");
  s.options = options;
  s.finished.clear();
  s.memory.clear();
  s.devices.clear();
  s.cuda.clear();
  s.cuda_bases.clear();
  s.next_event = 0;
  s.next_thread = 0;
  s.origin_ns = steady_ns();
  // What each allocator holds now: the memory timeline starts from there.
  const int cuda_devices = cuda::device_count();
  for (int d = -1; d < cuda_devices; ++d) {
    DeviceMemory m;
    m.device = d < 0 ? kCPU : Device(DeviceKind::CUDA, d);
    m.allocated_at_start = m.allocated_at_stop = m.peak_allocated = allocator_bytes(m.device);
    s.devices.emplace(device_key(m.device), m);
  }
  // Note [cuda timing]: kernels are timed by a pair of events each, read back at stop(); one
  // synchronisation here per device anchors that device's GPU clock to the host clock.
  if (options.cuda_timing) {
    for (int d = 0; d < cuda_devices; ++d) {
      CudaBase base;
      cuda::Stream stream = cuda::current_stream(d);
      stream.synchronize();
      base.event.record(stream);
      base.event.synchronize();
      base.host_ns = steady_ns() - s.origin_ns;
      s.cuda_bases.emplace(d, std::move(base));
    }
  }
  const int64_t id = s.id.load() + 1;
  s.id.store(id, std::memory_order_release);
  install_profiled_kernels(true);
  g_active.store(true, std::memory_order_release);
  return id;
}

SessionResult end_session(int64_t id) {
  Session& s = session();
  SessionResult result;
  std::vector<PendingCuda> cuda;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    TG_ASSERT(s.id.load() == id && g_active.load(), "profiler session ", id, " is not the running one");
    g_active.store(false, std::memory_order_release);
    install_profiled_kernels(false);
    result.events = std::move(s.finished);
    result.memory = std::move(s.memory);
    for (auto& [key, m] : s.devices) result.devices.push_back(m);
    cuda = std::move(s.cuda);
    s.finished.clear();
    s.memory.clear();
    s.devices.clear();
  }
  if (!cuda.empty()) {
    std::unordered_map<int64_t, size_t> index;
    for (size_t i = 0; i < result.events.size(); ++i) index[result.events[i].id] = i;
    for (const PendingCuda& p : cuda) {
      auto event = index.find(p.event_id);
      auto base = s.cuda_bases.find(p.device);
      if (event == index.end() || base == s.cuda_bases.end()) continue;
      // elapsed_ms waits for the later event: the one wait of the session, after it ended.
      const double start_ms = base->second.event.elapsed_ms(p.start);
      const double end_ms = base->second.event.elapsed_ms(p.end);
      ProfilerEvent& e = result.events[event->second];
      e.cuda_start_ns = base->second.host_ns + static_cast<int64_t>(start_ms * 1e6);
      e.cuda_end_ns = std::max(e.cuda_start_ns, base->second.host_ns + static_cast<int64_t>(end_ms * 1e6));
    }
  }
  s.cuda_bases.clear();
  std::sort(result.events.begin(), result.events.end(), [](const ProfilerEvent& a, const ProfilerEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.thread != b.thread) return a.thread < b.thread;
    return a.depth < b.depth;
  });
  std::sort(result.devices.begin(), result.devices.end(),
            [](const DeviceMemory& a, const DeviceMemory& b) { return device_key(a.device) < device_key(b.device); });
  return result;
}

}  // namespace tapegrad::profiler::detail
