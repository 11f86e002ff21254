// The CUDA runtime API on the host: devices, memory, copies, streams, events and errors.
//
// Note [lazy streams]: a stream is a queue that runs only when the host waits for it, or for
// something behind it: cudaStreamSynchronize, cudaDeviceSynchronize, an event's query or
// synchronise, a stream waiting on an event of it, a copy into pageable host memory, cudaFree. A
// kernel that reads another stream's result without a wait therefore reads memory that has not been
// written yet (fresh allocations are filled with 0xff bytes: NaN as floats, -1 as integers), as it
// may on a GPU, instead of passing because the host ran things in issue order.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "cuda_emulator/control.h"
#include "emulator.h"

#if defined(TG_EMU_ASAN)  // emulator.h
#include <sanitizer/asan_interface.h>
#endif

namespace tapegrad_emu {

namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's
constexpr size_t kGuardBytes = 64;  // checked (or poisoned) after each device allocation
constexpr unsigned char kGuardByte = 0xa5;
constexpr unsigned char kPoisonByte = 0xff;
constexpr size_t kDeviceMemory = size_t(80) << 30;  // what each emulated device reports

struct Device {
  CUstream_st legacy;
  size_t used = 0;
  cudaError_t pending_error = cudaSuccess;
};

struct State {
  std::vector<std::unique_ptr<Device>> devices;
  std::set<CUstream_st*> streams;  // created, not yet destroyed
  std::set<CUevent_st*> events;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  int64_t violations = 0;
  std::string last_violation;
  uint64_t launches = 0;
};

int configured_device_count() {
  const char* env = std::getenv("TAPEGRAD_EMULATOR_DEVICES");
  if (env == nullptr || *env == '\0') return 2;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 0 || n > 8) {
    std::fprintf(stderr, "[cuda emulator] TAPEGRAD_EMULATOR_DEVICES=%s is not a count from 0 to 8; using 2\n", env);
    return 2;
  }
  return static_cast<int>(n);
}

State& state() {
  static State* s = [] {
    auto* st = new State();  // never destroyed: tensors may be freed during static destruction
    for (int d = 0; d < configured_device_count(); ++d) {
      st->devices.push_back(std::make_unique<Device>());
      st->devices.back()->legacy.device = d;
      st->devices.back()->legacy.legacy = true;
    }
    return st;
  }();
  return *s;
}

thread_local int tls_device = 0;
thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local std::string tls_error_text;  // cudaGetErrorString's text for tls_error_code
thread_local cudaError_t tls_error_code = cudaSuccess;
thread_local std::string tls_returned_text;

const char* base_error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorCooperativeLaunchTooLarge:
      return "too many blocks in cooperative launch";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unrecognized error code";
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

bool valid_device(int d) {
  return d >= 0 && d < static_cast<int>(state().devices.size());
}

// A synchronising call's result: the pending error of the device, if any.
cudaError_t sync_result(int device) {
  cudaError_t e = take_pending_error(device);
  if (e != cudaSuccess) tls_last_error = e;
  return e;
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

void* host_allocate(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, std::max<size_t>(bytes, 1)) != 0) return nullptr;
  return p;
}

// Allocates size bytes plus the guard; nullptr when the host cannot.
void* allocate_guarded(size_t size) {
  if (size > (size_t(1) << 46)) return nullptr;  // beyond any host here; posix_memalign may overcommit
  const size_t total = round_up(size + kGuardBytes, kAlignment);
  auto* p = static_cast<unsigned char*>(host_allocate(total));
  if (p == nullptr) return nullptr;
  std::memset(p, kPoisonByte, size);
#if defined(TG_EMU_ASAN)
  ASAN_POISON_MEMORY_REGION(p + size, total - size);
#else
  std::memset(p + size, kGuardByte, total - size);
#endif
  return p;
}

void free_guarded(void* p, size_t size) {
#if defined(TG_EMU_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(static_cast<unsigned char*>(p) + size, round_up(size + kGuardBytes, kAlignment) - size);
#else
  (void)size;
#endif
  std::free(p);
}

bool guard_intact(const Allocation& a) {
#if defined(TG_EMU_ASAN)
  (void)a;
  return true;
#else
  const auto* p = reinterpret_cast<const unsigned char*>(a.base);
  const size_t total = round_up(a.size + kGuardBytes, kAlignment);
  for (size_t i = a.size; i < total; ++i)
    if (p[i] != kGuardByte) return false;
  return true;
#endif
}

[[maybe_unused]] void repair_guard(const Allocation& a) {  // unused under ASan, which guards itself
#if !defined(TG_EMU_ASAN)
  auto* p = reinterpret_cast<unsigned char*>(a.base);
  std::memset(p + a.size, kGuardByte, round_up(a.size + kGuardBytes, kAlignment) - a.size);
#else
  (void)a;
#endif
}

std::string describe(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

bool is_device_range(const void* p, size_t bytes) {
  const Allocation* a = find_allocation(p, bytes);
  return a != nullptr && a->device >= 0;
}

bool is_device_pointer(const void* p) {
  const Allocation* a = find_allocation(p, 0);
  return a != nullptr && a->device >= 0;
}

bool is_pinned_range(const void* p, size_t bytes) {
  const Allocation* a = find_allocation(p, bytes);
  return a != nullptr && a->device < 0;
}

// Checks a copy's pointers against its kind; the message names the culprit.
cudaError_t check_copy(const char* call, void* dst, const void* src, size_t count, cudaMemcpyKind& kind) {
  if (kind == cudaMemcpyDefault) {
    const bool d = is_device_pointer(dst), s = is_device_pointer(src);
    kind = d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
             : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": unknown copy kind");
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (dst_device && !is_device_range(dst, count))
    return fail(cudaErrorInvalidValue, std::string(call) + ": the destination " + describe(dst) + " + " +
                                           std::to_string(count) + " bytes is not inside one device allocation");
  if (src_device && !is_device_range(src, count))
    return fail(cudaErrorInvalidValue, std::string(call) + ": the source " + describe(src) + " + " +
                                           std::to_string(count) + " bytes is not inside one device allocation");
  if (!dst_device && is_device_pointer(dst))
    return fail(cudaErrorInvalidValue, std::string(call) + ": the destination is device memory but the kind says host");
  if (!src_device && is_device_pointer(src))
    return fail(cudaErrorInvalidValue, std::string(call) + ": the source is device memory but the kind says host");
  return cudaSuccess;
}

}  // namespace

std::recursive_mutex& state_mutex() {
  static auto* m = new std::recursive_mutex();
  return *m;
}

int device_count() {
  return static_cast<int>(state().devices.size());
}
int current_device() {
  return tls_device;
}

CUstream_st* resolve_stream(cudaStream_t stream) {
  State& s = state();
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    if (!valid_device(tls_device)) return nullptr;
    return &s.devices[static_cast<size_t>(tls_device)]->legacy;
  }
  if (s.streams.count(stream) == 0) return nullptr;
  return stream;
}

bool stream_alive(CUstream_st* stream) {
  State& s = state();
  if (s.streams.count(stream) != 0) return true;
  for (auto& d : s.devices)
    if (&d->legacy == stream) return true;
  return false;
}

void flush(CUstream_st* stream, uint64_t until) {
  if (stream->executed >= until || stream->queue.empty()) return;
  if (stream->flushing) {
    report_violation(stream->device, "a stream waits, through events, for its own later work (a cycle of waits)");
    return;
  }
  stream->flushing = true;
  while (stream->executed < until && !stream->queue.empty()) {
    std::function<void()> work = std::move(stream->queue.front());
    stream->queue.pop_front();
    work();
    ++stream->executed;
  }
  stream->flushing = false;
}

void flush_device(int device) {
  State& s = state();
  flush(&s.devices[static_cast<size_t>(device)]->legacy);
  for (CUstream_st* st : std::vector<CUstream_st*>(s.streams.begin(), s.streams.end()))
    if (st->device == device) flush(st);
}

void flush_all() {
  for (int d = 0; d < device_count(); ++d) flush_device(d);
}

void enqueue(CUstream_st* stream, std::function<void()> work) {
  State& s = state();
  if (capture_record(stream, work, "queued work")) return;  // recorded into a graph, not run
  // The legacy default stream and the blocking streams of its device wait for each other.
  if (stream->legacy) {
    for (CUstream_st* other : s.streams) {
      if (other->device != stream->device || !other->blocking || other->executed == other->enqueued) continue;
      const uint64_t until = other->enqueued;
      stream->queue.push_back([other, until] { flush(other, until); });
      ++stream->enqueued;
    }
  } else if (stream->blocking) {
    CUstream_st* legacy = &s.devices[static_cast<size_t>(stream->device)]->legacy;
    if (legacy->executed != legacy->enqueued) {
      const uint64_t until = legacy->enqueued;
      stream->queue.push_back([legacy, until] { flush(legacy, until); });
      ++stream->enqueued;
    }
  }
  stream->queue.push_back(std::move(work));
  ++stream->enqueued;
}

const Allocation* find_allocation(const void* p, size_t bytes) {
  State& s = state();
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin()) return nullptr;
  const Allocation& a = std::prev(it)->second;
  if (address < a.base || address - a.base > a.size) return nullptr;
  if (bytes > a.size - (address - a.base)) return nullptr;
  if (bytes > 0 && address - a.base == a.size) return nullptr;
  return &a;
}

void report_violation(int device, const std::string& message) {
  State& s = state();
  ++s.violations;
  s.last_violation = message;
  std::fprintf(stderr, "[cuda emulator] %s\n", message.c_str());
  if (device >= 0 && valid_device(device)) {
    s.devices[static_cast<size_t>(device)]->pending_error = cudaErrorLaunchFailure;
  } else {
    for (auto& d : s.devices) d->pending_error = cudaErrorLaunchFailure;
  }
  tls_error_code = cudaErrorLaunchFailure;
  tls_error_text = message;
}

cudaError_t take_pending_error(int device) {
  State& s = state();
  if (!valid_device(device)) return cudaSuccess;
  cudaError_t e = s.devices[static_cast<size_t>(device)]->pending_error;
  s.devices[static_cast<size_t>(device)]->pending_error = cudaSuccess;
  return e;
}

cudaError_t fail(cudaError_t error, const std::string& detail) {
  tls_last_error = error;
  tls_error_code = error;
  tls_error_text = detail;
  return error;
}

void check_allocation_guards(int device, const char* after) {
#if defined(TG_EMU_ASAN)
  (void)device, (void)after;
#else
  for (auto& [base, a] : state().allocations) {
    if (a.device < 0 || guard_intact(a)) continue;
    report_violation(device, std::string("out-of-bounds write: ") + after + " wrote past the end of the " +
                                 std::to_string(a.size) + "-byte allocation at " +
                                 describe(reinterpret_cast<void*>(base)) + " on cuda:" + std::to_string(a.device));
    repair_guard(a);
  }
#endif
}

namespace {
std::atomic<int64_t> g_launches_seen{0};
}  // namespace

int64_t launches_seen() {
  return g_launches_seen.load(std::memory_order_relaxed);
}

int64_t violation_count() {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  return state().violations;
}

std::string last_violation() {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  return state().last_violation;
}

// Kernel launches (cuda_emulator/launch.h).
void launch(const LaunchConfig& config, std::unique_ptr<KernelTask> task, const PointerArgument* pointers,
            size_t pointer_count) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  g_launches_seen.fetch_add(1, std::memory_order_relaxed);
  const dim3 g = config.grid, b = config.block;
  const std::string kernel = config.kernel;
  auto bad = [&](cudaError_t e, const std::string& why) {
    last_launch_error() = fail(e, "kernel " + kernel + ": " + why);
  };
  last_launch_error() = cudaSuccess;
  if (!valid_device(tls_device)) return bad(cudaErrorNoDevice, "no device");
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
    return bad(cudaErrorInvalidConfiguration, "a grid or block dimension is 0");
  if (threads > kMaxThreadsPerBlock || b.x > 1024 || b.y > 1024 || b.z > kMaxBlockDimZ)
    return bad(cudaErrorInvalidConfiguration, "block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " +
                                                  std::to_string(b.z) + ") exceeds sm_90's limits (1024 threads, " +
                                                  "z at most 64)");
  if (g.x > kMaxGridDimX || g.y > kMaxGridDimYZ || g.z > kMaxGridDimYZ)
    return bad(cudaErrorInvalidConfiguration, "grid (" + std::to_string(g.x) + ", " + std::to_string(g.y) + ", " +
                                                  std::to_string(g.z) +
                                                  ") exceeds sm_90's limits (y and z at most 65535)");
  if (config.dynamic_shared_bytes > dynamic_shared_limit(config.function))
    return bad(cudaErrorInvalidValue, std::to_string(config.dynamic_shared_bytes) +
                                          " bytes of dynamic shared memory, above " +
                                          std::to_string(dynamic_shared_limit(config.function)) +
                                          " (48 KiB unless cudaFuncSetAttribute raised it)");
  CUstream_st* stream = resolve_stream(config.stream);
  if (stream == nullptr) return bad(cudaErrorInvalidResourceHandle, "launched on a stream that does not exist");
  if (stream->device != tls_device)
    return bad(cudaErrorInvalidResourceHandle, "launched on a stream of cuda:" + std::to_string(stream->device) +
                                                   " while cuda:" + std::to_string(tls_device) + " is current");
  if (cudaError_t e = capture_enqueue_check(stream, "kernel launch"); e != cudaSuccess)
    return bad(e, "launched on a stream whose capture was invalidated, or on the legacy stream during a capture");
  std::vector<TouchedRange> touched;
  for (size_t i = 0; i < pointer_count; ++i) {
    const void* p = pointers[i].pointer;
    if (p == nullptr) continue;
    touched.push_back(TouchedRange{p, 0, "a pointer argument"});
    const Allocation* a = find_allocation(p, 0);
    const std::string which = "argument " + std::to_string(pointers[i].position) + " (" + describe(p) + ")";
    if (a == nullptr) return bad(cudaErrorInvalidValue, which + " points to host memory, not device memory");
    if (a->device >= 0 && a->device != tls_device)
      return bad(cudaErrorInvalidValue, which + " points to memory of cuda:" + std::to_string(a->device) +
                                            " but the kernel runs on cuda:" + std::to_string(tls_device));
  }
  const int device = tls_device;
  const uint64_t id = ++state().launches;
  std::shared_ptr<KernelTask> shared(std::move(task));
  LaunchConfig copy = config;
  auto name = std::make_shared<std::string>(kernel);
  copy.kernel = name->c_str();
  std::function<void()> work = [copy, shared, name, device, id] {
    const int saved = tls_device;
    tls_device = device;
    run_grid(copy, *shared, device, id);
    check_allocation_guards(device, ("kernel " + *name).c_str());
    tls_device = saved;
  };
  if (capture_record(stream, work, name->c_str(), std::move(touched))) return;
  enqueue(stream, std::move(work));
}

}  // namespace tapegrad_emu

using namespace tapegrad_emu;

#define EMU_LOCK std::lock_guard<std::recursive_mutex> emu_lock_(state_mutex())

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define EMU_NAME(e) \
  case e:           \
    return #e;
    EMU_NAME(cudaSuccess)
    EMU_NAME(cudaErrorInvalidValue)
    EMU_NAME(cudaErrorMemoryAllocation)
    EMU_NAME(cudaErrorInitializationError)
    EMU_NAME(cudaErrorInvalidConfiguration)
    EMU_NAME(cudaErrorInvalidDevicePointer)
    EMU_NAME(cudaErrorInvalidMemcpyDirection)
    EMU_NAME(cudaErrorNoDevice)
    EMU_NAME(cudaErrorInvalidDevice)
    EMU_NAME(cudaErrorInvalidResourceHandle)
    EMU_NAME(cudaErrorNotReady)
    EMU_NAME(cudaErrorIllegalAddress)
    EMU_NAME(cudaErrorLaunchOutOfResources)
    EMU_NAME(cudaErrorLaunchFailure)
    EMU_NAME(cudaErrorInvalidDeviceFunction)
    EMU_NAME(cudaErrorCooperativeLaunchTooLarge)
    EMU_NAME(cudaErrorIllegalState)
    EMU_NAME(cudaErrorStreamCaptureUnsupported)
    EMU_NAME(cudaErrorStreamCaptureInvalidated)
    EMU_NAME(cudaErrorStreamCaptureMerge)
    EMU_NAME(cudaErrorStreamCaptureUnmatched)
    EMU_NAME(cudaErrorStreamCaptureUnjoined)
    EMU_NAME(cudaErrorStreamCaptureIsolation)
    EMU_NAME(cudaErrorStreamCaptureImplicit)
    EMU_NAME(cudaErrorCapturedEvent)
    EMU_NAME(cudaErrorStreamCaptureWrongThread)
#undef EMU_NAME
  }
  return "cudaErrorUnknown";
}

// CUDA's text for the code, followed by what the emulator knows about the calling thread's latest
// error of that code (which kernel, which argument, which rule).
const char* cudaGetErrorString(cudaError_t error) {
  tls_returned_text = base_error_string(error);
  if (error != cudaSuccess && error == tls_error_code && !tls_error_text.empty())
    tls_returned_text += " [cuda emulator: " + tls_error_text + "]";
  return tls_returned_text.c_str();
}

cudaError_t cudaGetLastError() {
  cudaError_t e = tls_last_error;
  tls_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  return tls_last_error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  EMU_LOCK;
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
  *count = device_count();
  if (*count == 0) return fail(cudaErrorNoDevice, "TAPEGRAD_EMULATOR_DEVICES=0");
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice: null device");
  *device = tls_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  EMU_LOCK;
  if (!valid_device(device))
    return fail(cudaErrorInvalidDevice,
                "cudaSetDevice(" + std::to_string(device) + ") with " + std::to_string(device_count()) + " devices");
  tls_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  EMU_LOCK;
  if (prop == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such device");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "tapegrad CUDA emulator (sm_90)");
  prop->totalGlobalMem = kDeviceMemory;
  prop->sharedMemPerBlock = kStaticSharedLimit;
  prop->sharedMemPerBlockOptin = kSharedOptinLimit;
  prop->warpSize = static_cast<int>(kWarpSize);
  prop->maxThreadsPerBlock = static_cast<int>(kMaxThreadsPerBlock);
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = static_cast<int>(kMaxBlockDimZ);
  prop->maxGridSize[0] = static_cast<int>(kMaxGridDimX);
  prop->maxGridSize[1] = static_cast<int>(kMaxGridDimYZ);
  prop->maxGridSize[2] = static_cast<int>(kMaxGridDimYZ);
  prop->multiProcessorCount = kMultiprocessors;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return e;
  if (value == nullptr) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null value");
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = prop.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(prop.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = prop.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = prop.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = prop.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = prop.minor;
      break;
    case cudaDevAttrCooperativeLaunch:
      *value = 1;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(prop.sharedMemPerBlockOptin);
      break;
    default:
      return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  EMU_LOCK;
  if (!valid_device(tls_device)) return fail(cudaErrorNoDevice, "no device");
  if (cudaError_t e = capture_device_sync_check(tls_device, "cudaDeviceSynchronize"); e != cudaSuccess) return e;
  flush_device(tls_device);
  return sync_result(tls_device);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  EMU_LOCK;
  if (!valid_device(tls_device)) return fail(cudaErrorNoDevice, "no device");
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: null");
  *total_bytes = kDeviceMemory;
  *free_bytes = kDeviceMemory - state().devices[static_cast<size_t>(tls_device)]->used;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  EMU_LOCK;
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaMalloc: null pointer to the result");
  *ptr = nullptr;
  if (!valid_device(tls_device)) return fail(cudaErrorNoDevice, "no device");
  if (cudaError_t e = capture_unsafe_check("cudaMalloc"); e != cudaSuccess) return e;
  if (size == 0) return cudaSuccess;
  Device& d = *state().devices[static_cast<size_t>(tls_device)];
  void* p = size <= kDeviceMemory - d.used ? allocate_guarded(size) : nullptr;
  if (p == nullptr)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(size) +
                                               " bytes on cuda:" + std::to_string(tls_device) + " (" +
                                               std::to_string(d.used) + " bytes in use)");
  d.used += size;
  state().allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{reinterpret_cast<uintptr_t>(p), size, tls_device};
  *ptr = p;
  return cudaSuccess;
}

// Like CUDA's, waits for the device first (a kernel still queued may use the memory).
cudaError_t cudaFree(void* ptr) {
  EMU_LOCK;
  if (ptr == nullptr) return cudaSuccess;
  State& s = state();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second.device < 0)
    return fail(cudaErrorInvalidValue, "cudaFree(" + describe(ptr) + "): not the start of a device allocation");
  if (cudaError_t e = capture_unsafe_check("cudaFree"); e != cudaSuccess) return e;
  const int device = it->second.device;
  flush_all();
  it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  const Allocation a = it->second;
  if (!guard_intact(a))
    report_violation(device, "out-of-bounds write past the end of the " + std::to_string(a.size) +
                                 "-byte allocation at " + describe(ptr) + " on cuda:" + std::to_string(device) +
                                 ", found when it was freed");
  s.devices[static_cast<size_t>(device)]->used -= a.size;
  s.allocations.erase(it);
  free_guarded(ptr, a.size);
  return sync_result(device);
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  EMU_LOCK;
  (void)flags;
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaHostAlloc: null pointer to the result");
  *ptr = nullptr;
  if (device_count() == 0) return fail(cudaErrorNoDevice, "no device");
  if (cudaError_t e = capture_unsafe_check("cudaHostAlloc"); e != cudaSuccess) return e;
  void* p = size <= (size_t(1) << 40) ? host_allocate(size) : nullptr;
  if (p == nullptr) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc of " + std::to_string(size) + " bytes");
  state().allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{reinterpret_cast<uintptr_t>(p), size, -1};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  EMU_LOCK;
  if (ptr == nullptr) return cudaSuccess;
  State& s = state();
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second.device >= 0)
    return fail(cudaErrorInvalidValue, "cudaFreeHost(" + describe(ptr) + "): not a pinned allocation");
  if (cudaError_t e = capture_unsafe_check("cudaFreeHost"); e != cudaSuccess) return e;
  flush_all();  // a queued copy may still read it
  s.allocations.erase(reinterpret_cast<uintptr_t>(ptr));
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  EMU_LOCK;
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue, "cudaMemcpyAsync: null pointer");
  cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, count, kind);
  if (e != cudaSuccess) return e;
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: not a live stream");
  if (cudaError_t ce = capture_enqueue_check(s, "cudaMemcpyAsync"); ce != cudaSuccess) return ce;
  const bool pageable =
      (kind == cudaMemcpyHostToDevice && !is_pinned_range(src, count)) ||
      ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) && !is_pinned_range(dst, count));
  if (pageable) {
    if (cudaError_t ce = capture_pageable_check(s, "cudaMemcpyAsync"); ce != cudaSuccess) return ce;
  }
  const int device = s->device;
  if (kind == cudaMemcpyHostToDevice && !is_pinned_range(src, count)) {
    // Pageable memory is staged at the call, so the caller may reuse it at once (as CUDA allows).
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    enqueue(s, [dst, staged, device] {
      std::memcpy(dst, staged->data(), staged->size());
      check_allocation_guards(device, "a copy to the device");
    });
    return cudaSuccess;
  }
  std::function<void()> copy = [dst, src, count, device] {
    std::memmove(dst, src, count);
    check_allocation_guards(device, "a copy");
  };
  if (capture_record(
          s, copy, "cudaMemcpyAsync",
          {TouchedRange{dst, count, "the copy's destination"}, TouchedRange{src, count, "the copy's source"}}))
    return cudaSuccess;
  enqueue(s, std::move(copy));
  // Into pageable host memory the call returns once the data is there.
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) && !is_pinned_range(dst, count)) {
    flush(s);
    return sync_result(device);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  EMU_LOCK;
  if (cudaError_t e = capture_unsafe_check("cudaMemcpy"); e != cudaSuccess) return e;
  cudaError_t e = cudaMemcpyAsync(dst, src, count, kind, nullptr);
  if (e != cudaSuccess) return e;
  flush(resolve_stream(nullptr));
  return sync_result(tls_device);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  EMU_LOCK;
  if (count == 0) return cudaSuccess;
  if (!is_device_range(ptr, count))
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync: " + describe(ptr) + " + " + std::to_string(count) +
                                           " bytes is not inside one device allocation");
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: not a live stream");
  if (cudaError_t e = capture_enqueue_check(s, "cudaMemsetAsync"); e != cudaSuccess) return e;
  std::function<void()> set = [ptr, value, count] { std::memset(ptr, value, count); };
  if (capture_record(s, set, "cudaMemsetAsync", {TouchedRange{ptr, count, "the memset's destination"}}))
    return cudaSuccess;
  enqueue(s, std::move(set));
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  EMU_LOCK;
  if (cudaError_t e = capture_unsafe_check("cudaMemset"); e != cudaSuccess) return e;
  cudaError_t e = cudaMemsetAsync(ptr, value, count, nullptr);
  if (e != cudaSuccess) return e;
  flush(resolve_stream(nullptr));
  return sync_result(tls_device);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  EMU_LOCK;
  if (stream == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamCreate: null");
  if (!valid_device(tls_device)) return fail(cudaErrorNoDevice, "no device");
  auto* s = new CUstream_st();
  s->device = tls_device;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  state().streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  EMU_LOCK;
  if (stream == nullptr || state().streams.count(stream) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  capture_forget_stream(stream);
  flush(stream);  // queued work still completes, as on a GPU
  state().streams.erase(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  EMU_LOCK;
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  if (cudaError_t e = capture_sync_check(s, "cudaStreamSynchronize or cudaStreamQuery"); e != cudaSuccess) return e;
  flush(s);
  return sync_result(s->device);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return cudaStreamSynchronize(stream);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  EMU_LOCK;
  (void)flags;
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live stream");
  if (event == nullptr || state().events.count(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live event");
  bool handled = false;
  if (cudaError_t e = capture_stream_wait(s, event, handled); e != cudaSuccess || handled) return e;
  if (!event->recorded) return cudaSuccess;
  CUstream_st* other = event->stream;
  const uint64_t until = event->sequence;
  // The wait is for the work captured by the record at this moment, run when `s` gets there.
  enqueue(s, [other, until] {
    if (stream_alive(other)) flush(other, until);
  });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  EMU_LOCK;
  if (event == nullptr) return fail(cudaErrorInvalidValue, "cudaEventCreate: null");
  if (!valid_device(tls_device)) return fail(cudaErrorNoDevice, "no device");
  auto* e = new CUevent_st();
  e->flags = flags;
  e->device = tls_device;
  state().events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  EMU_LOCK;
  if (event == nullptr || state().events.count(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  state().events.erase(event);
  // A record task may still be queued: it checks the event is alive before stamping it.
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  EMU_LOCK;
  if (event == nullptr || state().events.count(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event");
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live stream");
  if (s->device != event->device)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventRecord: the event belongs to cuda:" + std::to_string(event->device) +
                    ", the stream to cuda:" + std::to_string(s->device));
  bool handled = false;
  if (cudaError_t ce = capture_event_record(event, s, handled); ce != cudaSuccess || handled) return ce;
  const uint64_t generation = ++event->generation;
  const bool timing = (event->flags & cudaEventDisableTiming) == 0;
  cudaEvent_t e = event;
  enqueue(s, [e, generation, timing] {
    if (state().events.count(e) == 0 || e->generation != generation) return;
    if (timing) e->time_ms = now_ms();
  });
  event->recorded = true;
  event->stream = s;
  event->sequence = s->enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  EMU_LOCK;
  if (event == nullptr || state().events.count(event) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  if (cudaError_t e = capture_event_sync_check(event, "cudaEventSynchronize or cudaEventQuery"); e != cudaSuccess)
    return e;
  if (!event->recorded) return cudaSuccess;
  if (stream_alive(event->stream)) flush(event->stream, event->sequence);
  return sync_result(event->device);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return cudaEventSynchronize(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  EMU_LOCK;
  if (ms == nullptr) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null");
  for (cudaEvent_t e : {start, end}) {
    if (e == nullptr || state().events.count(e) == 0)
      return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not a live event");
    if ((e->flags & cudaEventDisableTiming) != 0)
      return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created without timing");
    if (!e->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
    if (stream_alive(e->stream) && e->stream->executed < e->sequence)
      return fail(cudaErrorNotReady, "cudaEventElapsedTime: not complete");
  }
  *ms = static_cast<float>(end->time_ms - start->time_ms);
  return cudaSuccess;
}

}  // extern "C"
