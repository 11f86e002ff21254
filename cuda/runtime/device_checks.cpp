// The per-device error records of the deferred value checks and their reading at synchronisation
// points (Note [deferred checks] in device_checks.h).
#include "runtime/device_checks.h"

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/pinned_allocator.h"
#include "runtime/runtime.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad::cuda_backend {

namespace {

using backend::DeviceErrorRecord;

struct DeviceChecks {
  DeviceErrorRecord* record = nullptr;  // device memory, never freed (one per device per process)
  cudaStream_t read_stream = nullptr;   // non-blocking, for reads after a device or event wait
  // Pending: launches that may have reported since the record was last read clean. A clean read
  // through one stream settles only the launches of that stream, so it clears `pending` only when
  // every such launch ran on it.
  bool pending = false;
  bool several_streams = false;
  cudaStream_t stream = nullptr;
};

std::mutex g_mutex;
std::vector<std::unique_ptr<DeviceChecks>> g_devices;

// Under g_mutex.
DeviceChecks& checks_of(int device) {
  if (static_cast<size_t>(device) >= g_devices.size()) g_devices.resize(static_cast<size_t>(device) + 1);
  auto& slot = g_devices[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<DeviceChecks>();
  return *slot;
}

[[noreturn]] void raise(const DeviceErrorRecord& record) {
  detail::throw_error(backend::device_check_message(record));
}

// Under g_mutex, after a read that found `record` (on the host) and covered the launches of
// `stream` (all launches when device_wide): settles the pending state; clears the device's record
// (ordered on `stream`) and returns true when it holds an error.
bool settle(DeviceChecks& c, const DeviceErrorRecord& record, cudaStream_t stream, bool device_wide) {
  if (record.check != 0) {
    cuda::note_copy();
    TG_CUDA_CHECK(cudaMemsetAsync(c.record, 0, sizeof(DeviceErrorRecord), stream), "deferred device checks");
    c.pending = false;
    c.several_streams = false;
    return true;
  }
  if (device_wide || (!c.several_streams && c.stream == stream)) {
    c.pending = false;
    c.several_streams = false;
  }
  return false;
}

}  // namespace

DeviceErrorRecord* error_record(int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceChecks& c = checks_of(device);
  if (c.record == nullptr) {
    cuda::DeviceGuard guard(device);
    void* memory = nullptr;
    TG_CUDA_CHECK(cudaMalloc(&memory, sizeof(DeviceErrorRecord)), "deferred device checks");
    cuda::note_copy();
    TG_CUDA_CHECK(cudaMemsetAsync(memory, 0, sizeof(DeviceErrorRecord), stream), "deferred device checks");
    c.record = static_cast<DeviceErrorRecord*>(memory);
  }
  if (!c.pending) {
    c.pending = true;
    c.stream = stream;
  } else if (c.stream != stream) {
    c.several_streams = true;
  }
  return c.record;
}

DeferredErrorRead::DeferredErrorRead(int device, cudaStream_t stream) : device_(device), stream_(stream) {
  DeviceErrorRecord* record = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (static_cast<size_t>(device) >= g_devices.size() || !g_devices[static_cast<size_t>(device)] ||
        !g_devices[static_cast<size_t>(device)]->pending)
      return;
    record = g_devices[static_cast<size_t>(device)]->record;
  }
  // The block is handed back after the wait, so no stream use needs recording.
  host_ = pinned_host_allocator().allocate(sizeof(DeviceErrorRecord), Device(DeviceKind::CPU));
  cuda::note_copy();
  TG_CUDA_CHECK(cudaMemcpyAsync(host_.ptr, record, sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost, stream),
                "deferred device checks");
}

void DeferredErrorRead::raise_if_failed() {
  if (host_.ptr == nullptr) return;
  const DeviceErrorRecord record = *static_cast<const DeviceErrorRecord*>(host_.ptr);
  if (host_.deleter) host_.deleter(host_.ptr);
  host_ = DataPtr();
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    failed = settle(checks_of(device_), record, stream_, /*device_wide=*/false);
  }
  if (failed) {
    // The record's clearing is queued on stream_: wait for it (on this error path only, as
    // raise_device_errors does), so it cannot land after a later launch on another stream has
    // reported into the record and erase that report.
    cuda::note_host_sync();
    TG_CUDA_CHECK(cudaStreamSynchronize(stream_), "deferred device checks");
    raise(record);
  }
}

void raise_device_errors(int device, bool device_wide) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (static_cast<size_t>(device) >= g_devices.size() || !g_devices[static_cast<size_t>(device)]) return;
  DeviceChecks& c = *g_devices[static_cast<size_t>(device)];
  if (!c.pending) return;
  cuda::DeviceGuard guard(device);
  // A stream of its own: the legacy default stream would also wait for unrelated queued work.
  if (c.read_stream == nullptr)
    TG_CUDA_CHECK(cudaStreamCreateWithFlags(&c.read_stream, cudaStreamNonBlocking), "deferred device checks");
  DeviceErrorRecord record;
  cuda::note_copy();
  TG_CUDA_CHECK(cudaMemcpyAsync(&record, c.record, sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost, c.read_stream),
                "deferred device checks");
  cuda::note_host_sync();
  TG_CUDA_CHECK(cudaStreamSynchronize(c.read_stream), "deferred device checks");
  if (settle(c, record, c.read_stream, device_wide)) {
    cuda::note_host_sync();
    TG_CUDA_CHECK(cudaStreamSynchronize(c.read_stream), "deferred device checks");
    raise(record);
  }
}

}  // namespace tapegrad::cuda_backend
