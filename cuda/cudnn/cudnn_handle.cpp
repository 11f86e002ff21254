// Handles per device and thread. A thread that ends gives its handles back to a pool that later
// threads draw from, so short-lived threads do not leak one each.
//
// Note [handles are never destroyed]: the pool lives until the process ends and never calls
// cudnnDestroy; at exit the CUDA runtime may already be torn down, and destroying a handle then
// can crash. The operating system reclaims them.
#include "cudnn/cudnn_handle.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "cudnn/cudnn_check.h"
#include "kernels/launch.h"
#include "runtime/cuda_check.h"

namespace tapegrad::cuda_backend {

namespace {

class HandlePool {
 public:
  // A pooled handle for `device` (the current device), or a new one.
  cudnnHandle_t acquire(int device, const char* where) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<cudnnHandle_t>& free = free_[device];
      if (!free.empty()) {
        cudnnHandle_t handle = free.back();
        free.pop_back();
        return handle;
      }
    }
    cudnnHandle_t handle = nullptr;
    TG_CUDNN_CHECK(cudnnCreate(&handle), where);
    return handle;
  }

  void release(int device, cudnnHandle_t handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[device].push_back(handle);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int, std::vector<cudnnHandle_t>> free_;
};

// Leaked on purpose: threads may give handles back during static destruction.
HandlePool& pool() {
  static HandlePool* instance = new HandlePool();
  return *instance;
}

// The calling thread's handles, one per device it has used.
struct ThreadHandles {
  std::unordered_map<int, cudnnHandle_t> by_device;
  ~ThreadHandles() {
    for (const auto& [device, handle] : by_device) pool().release(device, handle);
  }
};

}  // namespace

cudnnHandle_t cudnn_handle(const char* where) {
  thread_local ThreadHandles handles;
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device), where);
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) it = handles.by_device.emplace(device, pool().acquire(device, where)).first;
  TG_CUDNN_CHECK(cudnnSetStream(it->second, current_stream()), where);
  return it->second;
}

}  // namespace tapegrad::cuda_backend
