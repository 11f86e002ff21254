// Emulation build: TG_LAUNCH_KERNEL, the one way tapegrad's CUDA code launches a kernel (see
// cuda/kernels/launch.h). Here it copies the arguments at the launch, as CUDA does, and hands the kernel
// with them to the runtime, which checks the configuration and the pointer arguments at once and
// queues the grid on the stream; the grid runs when that stream is next synchronised.
#pragma once

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emulator/device_code.h"

enum cudaError : int;
typedef enum cudaError cudaError_t;

typedef struct CUstream_st* cudaStream_t;

namespace tapegrad_emu {

// A kernel bound to its (copied) arguments; run_thread() runs the calling CUDA thread.
class KernelTask {
 public:
  virtual ~KernelTask() = default;
  virtual void run_thread() = 0;
};

// A pointer argument (by position), checked against the device's allocations at launch.
struct PointerArgument {
  int position;
  const void* pointer;
};

struct LaunchConfig {
  const char* kernel;
  dim3 grid, block;
  size_t dynamic_shared_bytes;
  cudaStream_t stream;
  bool cooperative = false;        // every block alive at once, grid.sync() allowed
  const void* function = nullptr;  // the kernel, for its cudaFuncSetAttribute settings (null: none)
};

// runtime.cpp. Sets the thread's last error (cudaGetLastError) on a bad launch.
void launch(const LaunchConfig& config, std::unique_ptr<KernelTask> task, const PointerArgument* pointers,
            size_t pointer_count);
// cooperative.cpp: cudaLaunchCooperativeKernel's checks (the grid must fit on the device at once:
// cudaErrorCooperativeLaunchTooLarge), then launch(); returns the launch's error, also kept as the
// thread's last error.
cudaError_t launch_cooperative(const LaunchConfig& config, std::unique_ptr<KernelTask> task,
                               const PointerArgument* pointers, size_t pointer_count);

template <class Body, class... Args>
class BoundKernel final : public KernelTask {
 public:
  template <class... A>
  explicit BoundKernel(Body body, A&&... args) : body_(body), args_(std::forward<A>(args)...) {}
  void run_thread() override { std::apply(body_, args_); }

 private:
  Body body_;
  std::tuple<Args...> args_;
};

// Records argument `position` in `pointers` when it is a pointer (checked against the allocations).
template <class A>
void note_pointer(const A& arg, int position, PointerArgument* pointers, size_t& count) {
  if constexpr (std::is_pointer_v<std::decay_t<A>>) {
    pointers[count++] = PointerArgument{position, static_cast<const void*>(arg)};
  } else {
    (void)arg, (void)position, (void)pointers, (void)count;
  }
}

template <class Body>
class Launcher {
 public:
  Launcher(const char* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream, Body body)
      : config_{kernel, grid, block, dynamic_shared_bytes, stream}, body_(body) {}

  template <class... A>
  void operator()(A&&... args) const {
    PointerArgument pointers[sizeof...(A) + 1];
    size_t count = 0;
    int position = 0;
    (note_pointer(args, position++, pointers, count), ...);
    launch(config_, std::make_unique<BoundKernel<Body, std::decay_t<A>...>>(body_, std::forward<A>(args)...), pointers,
           count);
  }

 private:
  LaunchConfig config_;
  Body body_;
};

// TG_LAUNCH_COOPERATIVE_KERNEL's launcher: the same argument handling, a cooperative launch whose
// call returns its cudaError_t, as cudaLaunchCooperativeKernel does.
template <class Body>
class CooperativeLauncher {
 public:
  CooperativeLauncher(const char* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
                      const void* function, Body body)
      : config_{kernel, grid, block, dynamic_shared_bytes, stream, true, function}, body_(body) {}

  template <class... A>
  cudaError_t operator()(A&&... args) const {
    PointerArgument pointers[sizeof...(A) + 1];
    size_t count = 0;
    int position = 0;
    (note_pointer(args, position++, pointers, count), ...);
    return launch_cooperative(config_,
                              std::make_unique<BoundKernel<Body, std::decay_t<A>...>>(body_, std::forward<A>(args)...),
                              pointers, count);
  }

 private:
  LaunchConfig config_;
  Body body_;
};

}  // namespace tapegrad_emu

#define TG_EMU_LAUNCH_COOPERATIVE_KERNEL(grid, block, dynamic_shared_bytes, stream, ...)       \
  ::tapegrad_emu::CooperativeLauncher(#__VA_ARGS__, grid, block, dynamic_shared_bytes, stream, \
                                      reinterpret_cast<const void*>(&__VA_ARGS__),             \
                                      [](auto&... kernel_arguments_) { __VA_ARGS__(kernel_arguments_...); })

#define TG_EMU_LAUNCH_KERNEL(grid, block, dynamic_shared_bytes, stream, ...)        \
  ::tapegrad_emu::Launcher(#__VA_ARGS__, grid, block, dynamic_shared_bytes, stream, \
                           [](auto&... kernel_arguments_) { __VA_ARGS__(kernel_arguments_...); })
// tapegrad's cuda/kernels/launch.h wraps both launch macros to count launches; code that includes only
// the emulator (its own tests) launches through this.
#define TG_LAUNCH_KERNEL TG_EMU_LAUNCH_KERNEL
#define TG_LAUNCH_COOPERATIVE_KERNEL TG_EMU_LAUNCH_COOPERATIVE_KERNEL
