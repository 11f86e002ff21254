// The emulator's shared internals: devices, allocations, streams and the reporting of violations.
// One process-wide state behind one recursive mutex: every API call takes it, and queued work runs
// while it is held (a stream's work may run another stream's, through a wait).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "cublas_v2.h"

// Whether AddressSanitizer instruments this build (gcc says __SANITIZE_ADDRESS__, clang
// __has_feature): fiber switches are then annotated and the space after allocations poisoned.
// The build also defines it for the emulator's uninstrumented files (CMakeLists.txt), which must
// still annotate fiber switches and poisoned memory for the instrumented code.
#if defined(TG_EMU_ASAN)
#elif defined(__SANITIZE_ADDRESS__)
#define TG_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_EMU_ASAN 1
#endif
#endif

#include "cuda_runtime.h"

namespace tapegrad_emu {
struct CaptureSequence;  // graph.cpp
}

struct CUstream_st {
  int device = 0;
  bool blocking = true;  // synchronises with the legacy default stream
  bool legacy = false;   // the device's legacy default stream (handle 0)
  bool flushing = false;
  uint64_t enqueued = 0;  // work items queued so far
  uint64_t executed = 0;  // of those, run so far (in order)
  std::deque<std::function<void()>> queue;
  tapegrad_emu::CaptureSequence* capture = nullptr;  // the capture it records into (graph.cpp)
};

struct CUevent_st {
  unsigned flags = 0;
  int device = 0;
  bool recorded = false;
  CUstream_st* stream = nullptr;                     // where it was last recorded
  uint64_t sequence = 0;                             // complete once stream->executed reaches it
  uint64_t generation = 0;                           // of the latest record, so an older record's task cannot stamp it
  double time_ms = 0;                                // host time when the record ran
  tapegrad_emu::CaptureSequence* capture = nullptr;  // last recorded into this (ongoing) capture
  unsigned long long capture_id = 0;                 // that capture's id (the pointer may be reused)
};

namespace tapegrad_emu {

std::recursive_mutex& state_mutex();

constexpr unsigned kWarpSize = 32;

// sm_90's limits.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 2147483647u;
constexpr unsigned kMaxGridDimYZ = 65535;
constexpr size_t kStaticSharedLimit = 48 * 1024;
constexpr size_t kSharedOptinLimit = 227 * 1024;
constexpr int kMultiprocessors = 132;

int device_count();
int current_device();
// The stream a handle names (0 and cudaStreamLegacy: the current device's legacy stream), or null
// for a handle that is not a live stream.
CUstream_st* resolve_stream(cudaStream_t stream);
// Queues `work` on `stream` (with the legacy stream's implicit ordering against blocking streams).
void enqueue(CUstream_st* stream, std::function<void()> work);
// Runs `stream`'s queued work up to item `until` (all of it by default).
void flush(CUstream_st* stream, uint64_t until = UINT64_MAX);
void flush_device(int device);
bool stream_alive(CUstream_st* stream);
void flush_all();

// Memory the emulator handed out.
struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  int device = -1;  // -1: pinned host memory
};
// The allocation holding [p, p + bytes), or null. One-past-the-end counts as inside for bytes == 0.
const Allocation* find_allocation(const void* p, size_t bytes);

// A broken CUDA rule: printed to stderr, counted, and returned as cudaErrorLaunchFailure by the
// next call that synchronises with `device` (-1: whichever synchronises next).
void report_violation(int device, const std::string& message);
// The error a synchronising call on `device` must return now (and forget), or cudaSuccess.
cudaError_t take_pending_error(int device);
// Records `error` as the calling thread's last error with a detailed explanation; returns it.
cudaError_t fail(cudaError_t error, const std::string& detail);

// Writes past the end of device allocations since the last check (builds without ASan, which
// poisons the space after each allocation instead).
void check_allocation_guards(int device, const char* after);

// cooperative.cpp: the dynamic shared memory a launch of `function` may ask for (48 KiB unless
// cudaFuncSetAttribute raised it; null: 48 KiB), and the calling thread's latest launch's result.
size_t dynamic_shared_limit(const void* function);
cudaError_t& last_launch_error();
// graph.cpp: stream capture. A pointer range a recorded node touches, checked again at replay.
struct TouchedRange {
  const void* pointer;
  size_t bytes;
  const char* what;
};
// When `stream` is capturing: records `work` (dropped if the capture was invalidated) and returns
// true; otherwise false and the caller queues it.
bool capture_record(CUstream_st* stream, std::function<void()>& work, const char* name,
                    std::vector<TouchedRange> touched = {});
// The error an enqueueing call on `stream` must return because of capture, or cudaSuccess:
// invalidated capture, or the legacy stream used while a blocking stream of its device captures.
cudaError_t capture_enqueue_check(CUstream_st* stream, const char* call);
// A call that waits for `stream` (synchronize, query): fails, invalidating it, while it captures.
cudaError_t capture_sync_check(CUstream_st* stream, const char* call);
// A call CUDA calls potentially unsafe during capture (cudaMalloc, cudaFree, synchronous copies,
// cudaDeviceSynchronize): fails, invalidating the captures it conflicts with, where prohibited.
cudaError_t capture_unsafe_check(const char* call);
// cudaDeviceSynchronize: fails while a stream of `device` captures (it would wait forever).
cudaError_t capture_device_sync_check(int device, const char* call);
// A copy between device and pageable host memory on a capturing stream: unsupported.
cudaError_t capture_pageable_check(CUstream_st* stream, const char* call);
// cudaEventRecord / cudaStreamWaitEvent / event queries during capture; `handled` says whether
// the capture took care of the call (nothing to queue).
cudaError_t capture_event_record(CUevent_st* event, CUstream_st* stream, bool& handled);
cudaError_t capture_stream_wait(CUstream_st* stream, CUevent_st* event, bool& handled);
cudaError_t capture_event_sync_check(CUevent_st* event, const char* call);
// A stream being destroyed: its capture, if any, is invalidated.
void capture_forget_stream(CUstream_st* stream);

// grid_runner.cpp: runs every block of a grid on the calling thread; false after a violation.
bool run_grid(const LaunchConfig& config, KernelTask& task, int device, uint64_t launch_id);

}  // namespace tapegrad_emu
