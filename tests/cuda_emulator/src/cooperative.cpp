// Cooperative launches: cudaFuncSetAttribute's dynamic shared memory opt-in, the occupancy
// calculator, and cudaLaunchCooperativeKernel's rule that the whole grid fits on the device at
// once (sm_90: 132 multiprocessors). The grid itself runs in grid_runner.cpp (Note [cooperative grids]).
#include <algorithm>
#include <map>
#include <string>

#include "emulator.h"

namespace tapegrad_emu {

namespace {

constexpr int kMaxThreadsPerMultiprocessor = 2048;
constexpr int kMaxBlocksPerMultiprocessor = 32;
constexpr size_t kSharedPerMultiprocessor = 228 * 1024;
constexpr size_t kSharedReservedPerBlock = 1024;  // the runtime's own share of each block's memory

std::map<const void*, size_t>& shared_limits() {
  static auto* limits = new std::map<const void*, size_t>();
  return *limits;
}

// Blocks of `threads` threads and `shared` bytes one multiprocessor holds at once.
int blocks_per_multiprocessor(unsigned threads, size_t shared) {
  const int warps = static_cast<int>((threads + kWarpSize - 1) / kWarpSize);
  int blocks = std::min(kMaxBlocksPerMultiprocessor, kMaxThreadsPerMultiprocessor / (warps * int(kWarpSize)));
  blocks = std::min<int>(blocks, static_cast<int>(kSharedPerMultiprocessor / (shared + kSharedReservedPerBlock)));
  return std::max(blocks, 0);
}

}  // namespace

size_t dynamic_shared_limit(const void* function) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  auto it = shared_limits().find(function);
  return function != nullptr && it != shared_limits().end() ? it->second : kStaticSharedLimit;
}

cudaError_t& last_launch_error() {
  thread_local cudaError_t error = cudaSuccess;
  return error;
}

cudaError_t launch_cooperative(const LaunchConfig& config, std::unique_ptr<KernelTask> task,
                               const PointerArgument* pointers, size_t pointer_count) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const dim3 g = config.grid, b = config.block;
  const uint64_t blocks = uint64_t(g.x) * g.y * g.z, threads = uint64_t(b.x) * b.y * b.z;
  if (threads > 0 && threads <= kMaxThreadsPerBlock) {
    const uint64_t fit = uint64_t(kMultiprocessors) *
                         blocks_per_multiprocessor(static_cast<unsigned>(threads), config.dynamic_shared_bytes);
    if (blocks > fit)
      return fail(cudaErrorCooperativeLaunchTooLarge,
                  "kernel " + std::string(config.kernel) + ": a cooperative grid of " + std::to_string(blocks) +
                      " blocks, but only " + std::to_string(fit) + " blocks of " + std::to_string(threads) +
                      " threads and " + std::to_string(config.dynamic_shared_bytes) +
                      " bytes of dynamic shared memory fit on sm_90's 132 multiprocessors at once");
  }
  launch(config, std::move(task), pointers, pointer_count);
  return last_launch_error();
}

}  // namespace tapegrad_emu

using namespace tapegrad_emu;

extern "C" {

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: null function");
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute not emulated");
  if (value < 0 || static_cast<size_t>(value) > kSharedOptinLimit)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                           " bytes of dynamic shared memory, above sm_90's 227 KiB");
  shared_limits()[func] = static_cast<size_t>(value);
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, const void* func, int block_size,
                                                          size_t dynamic_shared_bytes) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (num_blocks == nullptr || func == nullptr)
    return fail(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor: null argument");
  if (block_size <= 0 || static_cast<unsigned>(block_size) > kMaxThreadsPerBlock)
    return fail(cudaErrorInvalidValue,
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor: block size " + std::to_string(block_size));
  // A launch above the function's dynamic shared memory limit could not run at all.
  *num_blocks = dynamic_shared_bytes > dynamic_shared_limit(func)
                    ? 0
                    : blocks_per_multiprocessor(static_cast<unsigned>(block_size), dynamic_shared_bytes);
  return cudaSuccess;
}

}  // extern "C"
