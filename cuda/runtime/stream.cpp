// Streams, the per-thread current stream of each device, StreamGuard and events.
//
// Note [current stream]: each thread keeps, per device, the stream it made current (by
// StreamGuard or set_current_stream); a device without an entry uses its default stream, the
// legacy CUDA default stream. Kernels and copies look the stream up on every launch, so the lookup
// has a fast path: a thread that never changed a stream skips even the cudaGetDevice call.
#include <optional>
#include <vector>

#include "kernels/launch.h"
#include "runtime/cuda_check.h"
#include "runtime/device_checks.h"
#include "runtime/runtime.h"

namespace tapegrad::cuda {

namespace detail {

struct StreamOwner {
  explicit StreamOwner(cudaStream_t s) : stream(s) {}
  // Waits for queued work before destroying: a stream created later may get the same handle value,
  // and the caching allocator's free lists are keyed by that value.
  ~StreamOwner() {
    note_host_sync();
    if (cudaStreamSynchronize(stream) != cudaSuccess) (void)cudaGetLastError();
    if (cudaStreamDestroy(stream) != cudaSuccess) (void)cudaGetLastError();
  }
  StreamOwner(const StreamOwner&) = delete;
  StreamOwner& operator=(const StreamOwner&) = delete;
  cudaStream_t stream;
};

struct EventState {
  bool timing = false;
  cudaEvent_t event = nullptr;  // created on first record
  int device = -1;
  ~EventState() {
    if (event != nullptr && cudaEventDestroy(event) != cudaSuccess) (void)cudaGetLastError();
  }
};

}  // namespace detail

// Builds Stream handles for this file (Stream's raw constructor is private).
struct StreamAccess {
  static Stream make(cudaStream_t handle, int device, std::shared_ptr<detail::StreamOwner> owner) {
    return Stream(handle, device, std::move(owner));
  }
};

namespace {

// Indexed by device; an empty slot means the default stream.
thread_local std::vector<std::optional<Stream>> tls_current_streams;
thread_local int tls_non_default_count = 0;

// Never throws (used by StreamGuard's destructor): the vector is already large enough there.
void set_slot(int device, const Stream& stream) noexcept {
  auto& slots = tls_current_streams;
  if (static_cast<size_t>(device) >= slots.size()) {
    if (stream.is_default()) return;  // nothing to record
    try {
      slots.resize(static_cast<size_t>(device) + 1);
    } catch (...) {
      return;  // out of host memory for a handful of pointers: keep the previous stream
    }
  }
  std::optional<Stream>& slot = slots[static_cast<size_t>(device)];
  if (slot) --tls_non_default_count;
  if (stream.is_default()) {
    slot.reset();
  } else {
    slot = stream;
    ++tls_non_default_count;
  }
}

bool query_status(cudaError_t status, const char* call, const char* where) {
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error for the next check to find
    return false;
  }
  cuda_backend::throw_cuda_error(status, call, where);
}

}  // namespace

Stream::Stream(int device) {
  int index = cuda_backend::resolve_device(device, "cuda::Stream");
  DeviceGuard guard(index);
  cudaStream_t stream = nullptr;
  TG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cuda::Stream");
  handle_ = stream;
  device_ = index;
  owner_ = std::make_shared<detail::StreamOwner>(stream);
}

Stream Stream::default_stream(int device) {
  return StreamAccess::make(nullptr, cuda_backend::resolve_device(device, "cuda::default_stream"), nullptr);
}

// The legacy default stream (handle 0) means "the current device's", hence the guards below.
void Stream::synchronize() const {
  DeviceGuard guard(device_);
  cuda_backend::DeferredErrorRead read(device_, static_cast<cudaStream_t>(handle_));
  note_host_sync();
  TG_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "cuda::Stream::synchronize");
  read.raise_if_failed();
}

bool Stream::query() const {
  DeviceGuard guard(device_);
  return query_status(cudaStreamQuery(static_cast<cudaStream_t>(handle_)), "cudaStreamQuery", "cuda::Stream::query");
}

void Stream::wait(const Event& event) const {
  if (!event.is_recorded()) return;
  DeviceGuard guard(device_);
  TG_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_), static_cast<cudaEvent_t>(event.handle()), 0),
                "cuda::Stream::wait");
}

Stream current_stream(int device) {
  int index = cuda_backend::resolve_device(device, "cuda::current_stream");
  const auto& slots = tls_current_streams;
  if (static_cast<size_t>(index) < slots.size() && slots[static_cast<size_t>(index)])
    return *slots[static_cast<size_t>(index)];
  return Stream::default_stream(index);
}

Stream default_stream(int device) {
  return Stream::default_stream(device);
}

void set_current_stream(const Stream& stream) {
  cuda_backend::resolve_device(stream.device(), "cuda::set_current_stream");
  set_slot(stream.device(), stream);
}

StreamGuard::StreamGuard(const Stream& stream) : original_device_(cuda_backend::current_device_index()) {
  cuda_backend::resolve_device(stream.device(), "cuda::StreamGuard");
  original_stream_ = current_stream(stream.device());
  // Size the slots now so that restoring in the destructor never allocates.
  if (tls_current_streams.size() < static_cast<size_t>(device_count()))
    tls_current_streams.resize(static_cast<size_t>(device_count()));
  if (original_device_ != stream.device()) TG_CUDA_CHECK(cudaSetDevice(stream.device()), "cuda::StreamGuard");
  set_slot(stream.device(), stream);
}

StreamGuard::~StreamGuard() {
  set_slot(original_stream_->device(), *original_stream_);
  int device = -1;
  if (cudaGetDevice(&device) == cudaSuccess && device != original_device_) (void)cudaSetDevice(original_device_);
}

Event::Event(bool enable_timing) : state_(std::make_shared<detail::EventState>()) {
  state_->timing = enable_timing;
}

void Event::record() {
  record(current_stream());
}

void Event::record(const Stream& stream) {
  DeviceGuard guard(stream.device());
  if (state_->event == nullptr) {
    cudaEvent_t event = nullptr;
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&event, state_->timing ? cudaEventDefault : cudaEventDisableTiming),
                  "cuda::Event::record");
    state_->event = event;
    state_->device = stream.device();
  }
  TG_CHECK(state_->device == stream.device(), "cuda::Event::record: the event belongs to cuda:", state_->device,
           " but the stream to cuda:", stream.device());
  TG_CUDA_CHECK(cudaEventRecord(state_->event, static_cast<cudaStream_t>(stream.handle())), "cuda::Event::record");
}

void Event::synchronize() const {
  if (state_->event == nullptr) return;
  note_host_sync();
  TG_CUDA_CHECK(cudaEventSynchronize(state_->event), "cuda::Event::synchronize");
  cuda_backend::raise_device_errors(state_->device, /*device_wide=*/false);
}

bool Event::query() const {
  if (state_->event == nullptr) return true;
  return query_status(cudaEventQuery(state_->event), "cudaEventQuery", "cuda::Event::query");
}

float Event::elapsed_ms(const Event& end) const {
  TG_CHECK(state_->timing && end.state_->timing, "cuda::Event::elapsed_ms: both events need enable_timing = true");
  TG_CHECK(is_recorded() && end.is_recorded(), "cuda::Event::elapsed_ms: both events must have been recorded");
  end.synchronize();
  float ms = 0.0f;
  TG_CUDA_CHECK(cudaEventElapsedTime(&ms, state_->event, end.state_->event), "cuda::Event::elapsed_ms");
  return ms;
}

bool Event::is_recorded() const {
  return state_->event != nullptr;
}
bool Event::enable_timing() const {
  return state_->timing;
}
void* Event::handle() const {
  return state_->event;
}

}  // namespace tapegrad::cuda

namespace tapegrad::cuda_backend {

cudaStream_t current_stream(int device) {
  const auto& slots = cuda::tls_current_streams;
  if (device >= 0 && static_cast<size_t>(device) < slots.size() && slots[static_cast<size_t>(device)])
    return static_cast<cudaStream_t>(slots[static_cast<size_t>(device)]->handle());
  return nullptr;
}

cudaStream_t current_stream() {
  if (cuda::tls_non_default_count == 0) return nullptr;  // see Note [current stream]
  return current_stream(current_device_index());
}

}  // namespace tapegrad::cuda_backend
