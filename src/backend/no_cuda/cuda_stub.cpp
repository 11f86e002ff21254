// The CUDA entry points of a build without the CUDA backend (TAPEGRAD_CUDA=OFF): no devices,
// nothing to register, statistics all zero, and a clear Error from anything that needs a GPU.
#include "backend/kernel_table.h"
#include "tapegrad/cuda/device.h"
#include "tapegrad/cuda/memory.h"
#include "tapegrad/cuda/stream.h"

namespace tapegrad {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  detail::throw_error(detail::str_cat(what, ": this build of tapegrad has no CUDA backend (configured with ",
                                      "TAPEGRAD_CUDA=OFF or without a CUDA toolkit), so no CUDA device is available"));
}
}  // namespace

namespace cuda {

bool is_available() {
  return false;
}
int device_count() {
  return 0;
}

int current_device() {
  no_cuda("cuda::current_device");
}
void set_device(int) {
  no_cuda("cuda::set_device");
}
void synchronize(int) {
  no_cuda("cuda::synchronize");
}
DeviceProperties get_device_properties(int) {
  no_cuda("cuda::get_device_properties");
}
MemoryInfo mem_get_info(int) {
  no_cuda("cuda::mem_get_info");
}

DeviceGuard::DeviceGuard(int device) : device_(device) {
  if (device_ >= 0) no_cuda("cuda::DeviceGuard");
}
DeviceGuard::~DeviceGuard() = default;

// No Stream can exist in this build: its constructors throw, so the members are never reached.
namespace detail {
struct StreamOwner {};
struct EventState {
  bool timing = false;
};
}  // namespace detail

Stream::Stream(int) {
  no_cuda("cuda::Stream");
}
Stream Stream::default_stream(int) {
  no_cuda("cuda::default_stream");
}
void Stream::synchronize() const {
  no_cuda("cuda::Stream::synchronize");
}
bool Stream::query() const {
  no_cuda("cuda::Stream::query");
}
void Stream::wait(const Event&) const {
  no_cuda("cuda::Stream::wait");
}
Stream current_stream(int) {
  no_cuda("cuda::current_stream");
}
Stream default_stream(int) {
  no_cuda("cuda::default_stream");
}
void set_current_stream(const Stream&) {
  no_cuda("cuda::set_current_stream");
}
StreamGuard::StreamGuard(const Stream&) : original_device_(-1) {
  (void)original_device_;  // used by the CUDA build only
  no_cuda("cuda::StreamGuard");
}
StreamGuard::~StreamGuard() = default;

// An Event is created lazily on its first record, so constructing one works; recording cannot.
Event::Event(bool enable_timing) : state_(std::make_shared<detail::EventState>()) {
  state_->timing = enable_timing;
}
void Event::record(const Stream&) {
  no_cuda("cuda::Event::record");
}
void Event::record() {
  no_cuda("cuda::Event::record");
}
void Event::synchronize() const {}
bool Event::query() const {
  return true;
}
float Event::elapsed_ms(const Event&) const {
  no_cuda("cuda::Event::elapsed_ms");
}
bool Event::is_recorded() const {
  return false;
}
bool Event::enable_timing() const {
  return state_->timing;
}
void* Event::handle() const {
  return nullptr;
}

MemoryStats memory_stats(int) {
  return {};
}
size_t memory_allocated(int) {
  return 0;
}
size_t memory_reserved(int) {
  return 0;
}
size_t max_memory_allocated(int) {
  return 0;
}
void reset_peak_memory_stats(int) {}
void empty_cache() {}
bool caching_allocator_enabled() {
  return true;
}
void record_stream(const Tensor&, const Stream&) {
  no_cuda("cuda::record_stream");
}
void copy_to_host_async(const Tensor&, const Tensor&) {
  no_cuda("cuda::copy_to_host_async");
}

HostMemoryStats host_memory_stats() {
  return {};
}
void empty_host_cache() {}
Allocator& host_allocator() {
  no_cuda("pinned host memory");
}
bool is_pinned(const void*) {
  return false;
}

}  // namespace cuda

namespace backend {
void register_cuda_backend() {}
}  // namespace backend

}  // namespace tapegrad

// No NVTX without the CUDA toolkit: profiler::Range records only profiler events.
namespace tapegrad::profiler::detail {
void nvtx_push(const char*) {}
void nvtx_pop() {}
}  // namespace tapegrad::profiler::detail
