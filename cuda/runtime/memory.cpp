// Device memory and host<->device copies: registers the caching allocator and the copy slots, and
// implements the public memory API (tapegrad/cuda/memory.h).
//
// Copies run on the current stream of the tensor's device (made current for the call). Host to
// device never waits: pageable memory is first staged into a pinned block (so the caller may
// free or change its buffer at once). Device to host waits for the stream, so the data is in place
// when it returns; that wait is also where deferred device checks are raised (device_checks.h).
#include <cuda_runtime.h>

#include <cstring>

#include "register.h"
#include "runtime/caching_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/device_checks.h"
#include "runtime/pinned_allocator.h"
#include "runtime/runtime.h"
#include "tapegrad/cuda/counters.h"
#include "tapegrad/cuda/stream.h"

namespace tapegrad::cuda_backend {

Allocator& device_allocator() {
  return caching_allocator();
}

namespace {

// Pageable uploads up to this size are staged through pinned memory (see copy_from_cpu).
constexpr size_t kMaxStagedBytes = size_t(64) << 20;

void check_copy(const char* op, const Tensor& src, const Tensor& dst) {
  TG_CHECK(src.is_contiguous() && dst.is_contiguous() && src.dtype() == dst.dtype() && src.numel() == dst.numel(), op,
           ": expected contiguous tensors of one dtype and size, got ", src.dtype(), " ", shape_str(src.sizes()),
           " and ", dst.dtype(), " ", shape_str(dst.sizes()));
}

// Overwrites dst (on a CUDA device) with the contiguous host tensor src_cpu.
void copy_from_cpu(const Tensor& src_cpu, const Tensor& dst) {
  check_copy("copy to cuda", src_cpu, dst);
  const size_t nbytes = static_cast<size_t>(src_cpu.numel()) * src_cpu.itemsize();
  if (nbytes == 0) return;
  const int device = dst.device().index();
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  // The DMA reads the host buffer later, so the pinned allocator must not reuse it before the
  // stream passes this copy (Note [pinned blocks]). Pageable memory is copied into a pinned block
  // first, given back at once: the allocator holds it until the stream has passed the copy. Above
  // kMaxStagedBytes (a checkpoint, a whole data set) the pinned cache would keep a block that
  // large for good, so such an upload waits for its stream instead.
  const void* source = src_cpu.data_ptr();
  DataPtr staging;
  bool wait = false;
  if (!pinned_host_allocator().record_use(source, nbytes, stream, device)) {
    if (nbytes <= kMaxStagedBytes) {
      staging = pinned_host_allocator().allocate(nbytes, kCPU);
      std::memcpy(staging.ptr, source, nbytes);
      pinned_host_allocator().record_use(staging.ptr, nbytes, stream, device);
      source = staging.ptr;
    } else {
      wait = true;
    }
  }
  cuda::note_copy();
  const cudaError_t status = cudaMemcpyAsync(dst.data_ptr(), source, nbytes, cudaMemcpyHostToDevice, stream);
  if (staging.deleter) staging.deleter(staging.ptr);
  TG_CUDA_CHECK(status, "copy to cuda");
  if (wait) {
    cuda::note_host_sync();
    TG_CUDA_CHECK(cudaStreamSynchronize(stream), "copy to cuda");
  }
}

// Overwrites the contiguous host tensor dst_cpu with src (on a CUDA device); valid on return.
void copy_to_cpu(const Tensor& src, const Tensor& dst_cpu) {
  check_copy("copy to cpu", src, dst_cpu);
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.itemsize();
  if (nbytes == 0) return;
  const int device = src.device().index();
  cuda::DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  DeferredErrorRead read(device, stream);
  cuda::note_copy();
  TG_CUDA_CHECK(cudaMemcpyAsync(dst_cpu.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDeviceToHost, stream),
                "copy to cpu");
  cuda::note_host_sync();
  TG_CUDA_CHECK(cudaStreamSynchronize(stream), "copy to cpu");
  read.raise_if_failed();
}

}  // namespace

void register_memory(backend::KernelTable& table) {
  table.allocator = &device_allocator();
  table.copy_from_cpu = copy_from_cpu;
  table.copy_to_cpu = copy_to_cpu;
}

}  // namespace tapegrad::cuda_backend

namespace tapegrad::cuda {

MemoryStats memory_stats(int device) {
  return cuda_backend::caching_allocator().stats(device);
}
size_t memory_allocated(int device) {
  return memory_stats(device).allocated_bytes;
}
size_t memory_reserved(int device) {
  return memory_stats(device).reserved_bytes;
}
size_t max_memory_allocated(int device) {
  return memory_stats(device).peak_allocated_bytes;
}
void reset_peak_memory_stats(int device) {
  cuda_backend::caching_allocator().reset_peak_stats(device);
}
void empty_cache() {
  cuda_backend::caching_allocator().empty_cache();
}
bool caching_allocator_enabled() {
  return cuda_backend::CachingAllocator::enabled();
}

void record_stream(const Tensor& tensor, const Stream& stream) {
  TG_CHECK(tensor.defined(), "cuda::record_stream: undefined tensor");
  TG_CHECK(tensor.device().is_cuda(), "cuda::record_stream: expected a tensor on a CUDA device, got ", tensor.device());
  TG_CHECK(tensor.device().index() == stream.device(), "cuda::record_stream: the tensor is on ", tensor.device(),
           " but the stream on cuda:", stream.device());
  cuda_backend::caching_allocator().record_stream(tensor.storage()->data(), stream.device(),
                                                  static_cast<cudaStream_t>(stream.handle()));
}

void copy_to_host_async(const Tensor& dst, const Tensor& src) {
  constexpr const char* op = "cuda::copy_to_host_async";
  TG_CHECK(dst.defined() && src.defined(), op, ": undefined ", dst.defined() ? "source" : "destination");
  TG_CHECK(src.device().is_cuda(), op, ": the source must be on a CUDA device, got ", src.device());
  TG_CHECK(dst.device().is_cpu(), op, ": the destination must be a CPU tensor, got ", dst.device());
  TG_CHECK(src.is_contiguous() && dst.is_contiguous(), op, ": expected contiguous tensors, got a ",
           src.is_contiguous() ? "non-contiguous destination" : "non-contiguous source");
  TG_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), op,
           ": expected tensors of one dtype and size, got ", src.dtype(), " ", shape_str(src.sizes()), " and ",
           dst.dtype(), " ", shape_str(dst.sizes()));
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.itemsize();
  const int device = src.device().index();
  DeviceGuard guard(device);
  cudaStream_t stream = cuda_backend::current_stream(device);
  // The DMA writes the block later: the allocator must not hand it out again before the stream has
  // passed the copy (Note [pinned blocks]), and pageable memory would make the copy synchronous.
  TG_CHECK(dst.is_pinned() && cuda_backend::pinned_host_allocator().record_use(dst.data_ptr(), nbytes, stream, device),
           op, ": the destination must be in pinned memory (Tensor::pin_memory or cuda::host_allocator)");
  if (nbytes == 0) return;
  note_copy();
  TG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDeviceToHost, stream), op);
}

HostMemoryStats host_memory_stats() {
  return cuda_backend::pinned_host_allocator().stats();
}
void empty_host_cache() {
  cuda_backend::pinned_host_allocator().empty_cache();
}

Allocator& host_allocator() {
  TG_CHECK(is_available(), "pinned host memory needs a CUDA device, and none is available (device_count() == 0)");
  return cuda_backend::pinned_host_allocator();
}

bool is_pinned(const void* ptr) {
  return cuda_backend::pinned_host_allocator().contains(ptr, 0);
}

}  // namespace tapegrad::cuda
