// Note [cuBLAS handles]: a handle is not safe to share between threads, and creating one costs
// milliseconds, so each thread leases one handle per device from a process-wide pool and returns
// it when the thread ends (DataLoader threads come and go; their handles are reused, not leaked).
// The pool itself is never destroyed: at process exit the CUDA runtime may already be gone, and
// destroying handles then fails or crashes (PyTorch makes the same choice).
//
// Workspaces: cuBLAS kernels use their workspace asynchronously on the handle's stream, so two
// streams must never share one. Each pooled handle keeps one workspace per stream it has been
// used on, allocated from the device allocator. Stream handles are reused once destroyed, so the
// list stays short in practice; should a thread cycle through many streams, the workspaces are
// dropped together after a device synchronisation (the only point where none can be in use).
#include "blas/cublas_handle.h"

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "blas/cublas_loader.h"
#include "kernels/launch.h"
#include "runtime/caching_allocator.h"

namespace tapegrad::cuda_backend {

void throw_cublas_error(cublasStatus_t status, const char* call, const char* where) {
  detail::throw_error(detail::str_cat(where, ": cuBLAS call ", call,
                                      " failed: ", cublas_api().get_status_string(status), " (status ",
                                      static_cast<int>(status), ")"));
}

namespace {

// cuBLAS's recommendation for Hopper; smaller workspaces make some GEMM shapes pick slower kernels.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kMaxWorkspacesPerHandle = 8;

struct PooledHandle {
  cublasHandle_t handle = nullptr;
  std::unordered_map<cudaStream_t, DataPtr> workspaces;
};

class HandlePool {
 public:
  PooledHandle* acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<PooledHandle*>& free = free_[device];
      if (!free.empty()) {
        PooledHandle* handle = free.back();
        free.pop_back();
        return handle;
      }
    }
    auto* pooled = new PooledHandle;  // owned by the pool from now on, for the life of the process
    TG_CUBLAS_CHECK(cublas_api().create(&pooled->handle), "cublas");
    return pooled;
  }

  void release(int device, PooledHandle* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[device].push_back(handle);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int, std::vector<PooledHandle*>> free_;
};

HandlePool& pool() {
  static HandlePool* pool = new HandlePool;  // never destroyed, see the note above
  return *pool;
}

// The handles this thread holds, by device; given back to the pool when the thread ends.
struct ThreadHandles {
  std::unordered_map<int, PooledHandle*> by_device;
  ~ThreadHandles() {
    for (auto& [device, handle] : by_device) pool().release(device, handle);
  }
};

thread_local ThreadHandles t_handles;

}  // namespace

cublasHandle_t cublas_handle() {
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device), "cublas");
  PooledHandle*& pooled = t_handles.by_device[device];
  if (pooled == nullptr) pooled = pool().acquire(device);

  cudaStream_t stream = current_stream();
  // cublasSetStream resets the workspace to cuBLAS's default pool, so the workspace is set after it.
  TG_CUBLAS_CHECK(cublas_api().set_stream(pooled->handle, stream), "cublas");
  auto found = pooled->workspaces.find(stream);
  if (found == pooled->workspaces.end()) {
    if (pooled->workspaces.size() >= kMaxWorkspacesPerHandle) {
      cuda::note_host_sync();
      TG_CUDA_CHECK(cudaDeviceSynchronize(), "cublas workspace");
      pooled->workspaces.clear();
    }
    DataPtr memory = device_allocator().allocate(kWorkspaceBytes, Device(DeviceKind::CUDA, device));
    found = pooled->workspaces.emplace(stream, std::move(memory)).first;
  }
  void* workspace = found->second.ptr;
  TG_CUBLAS_CHECK(cublas_api().set_workspace(pooled->handle, workspace, kWorkspaceBytes), "cublas");
  return pooled->handle;
}

}  // namespace tapegrad::cuda_backend
