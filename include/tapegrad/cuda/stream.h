// CUDA streams and events, as in PyTorch's torch.cuda.Stream / torch.cuda.Event.
//
// Every op's kernels, and tapegrad's host<->device copies, run on the calling thread's *current
// stream* of the device involved. It is the device's default stream unless a StreamGuard (or
// set_current_stream) chose another one. Work on one stream runs in order; work on different
// streams may overlap, so hand results between streams with an Event:
//
//   cuda::Stream side;                       // a new stream on the current device
//   cuda::Event ready;
//   {
//     cuda::StreamGuard guard(side);         // ops below are queued on `side`
//     y = matmul(a, b);
//     ready.record();                        // on the current stream, i.e. `side`
//   }
//   cuda::current_stream().wait(ready);      // the default stream waits for `side`'s matmul
//   z = relu(y);
//
// Memory and streams: the caching allocator reuses a freed block only for later work on the stream
// it was allocated on, which is safe because that stream runs in order. A tensor allocated on one
// stream and used on another must be kept alive until that use has finished, or marked with
// cuda::record_stream (tapegrad/cuda/memory.h).
//
// Without a device (or in a build without CUDA), creating a Stream and every call that needs a
// device throw tapegrad::Error; an Event can be constructed (it is created lazily) but not recorded.
#pragma once

#include <memory>
#include <optional>

namespace tapegrad::cuda {

namespace detail {
struct StreamOwner;  // owns a created stream; destroys it when the last Stream copy goes
struct EventState;
}  // namespace detail

class Event;

// A handle to a CUDA stream on one device. Copies refer to the same stream; a created stream is
// destroyed (after its queued work finishes) when its last copy goes.
class Stream {
 public:
  // Creates a new stream on `device` (-1: the current device). Like PyTorch's streams it does not
  // synchronise implicitly with the default stream. Throws when no device is available.
  explicit Stream(int device = -1);

  // The default stream of `device` (-1: the current device): the legacy CUDA default stream.
  static Stream default_stream(int device = -1);

  int device() const { return device_; }
  bool is_default() const { return handle_ == nullptr; }
  // Blocks until all work queued on this stream has finished.
  void synchronize() const;
  // True when all work queued on this stream has finished (never blocks).
  bool query() const;
  // Work queued on this stream after this call waits until `event` completes. An event that was
  // never recorded is complete already (nothing to wait for).
  void wait(const Event& event) const;
  // The cudaStream_t, for interoperation with other CUDA code (nullptr for the default stream).
  void* handle() const { return handle_; }

  bool operator==(const Stream& other) const { return handle_ == other.handle_ && device_ == other.device_; }
  bool operator!=(const Stream& other) const { return !(*this == other); }

 private:
  Stream(void* handle, int device, std::shared_ptr<detail::StreamOwner> owner)
      : handle_(handle), device_(device), owner_(std::move(owner)) {}
  friend struct StreamAccess;

  void* handle_ = nullptr;
  int device_ = 0;
  std::shared_ptr<detail::StreamOwner> owner_;
};

// The calling thread's current stream on `device` (-1: the current device).
Stream current_stream(int device = -1);
// Same as Stream::default_stream.
Stream default_stream(int device = -1);
// Makes `stream` the calling thread's current stream on its device (until changed again).
// Prefer StreamGuard, which restores the previous stream.
void set_current_stream(const Stream& stream);

// Makes `stream` current for the calling thread, and its device the current device, for the
// lifetime of the guard; both are restored after.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int original_device_;
  std::optional<Stream> original_stream_;  // the stream it replaced on `stream`'s device
};

// A CUDA event: a marker queued on a stream, to wait for or to time work. Copies refer to the
// same event. The CUDA event is created on first record(), on the device of that stream; an event
// that was never recorded counts as complete.
class Event {
 public:
  // enable_timing: needed for elapsed_ms(); events without it are cheaper to record and wait on.
  explicit Event(bool enable_timing = false);

  // Queues the event on `stream` (default: the current stream of the current device), replacing
  // an earlier record. Throws if the event was created on another device.
  void record(const Stream& stream);
  void record();
  // Blocks until the work queued before the latest record() has finished.
  void synchronize() const;
  // True when that work has finished (or the event was never recorded); never blocks.
  bool query() const;
  // Milliseconds between this event and `end`, both recorded with enable_timing; waits for `end`
  // to complete first. Throws if either was created without timing or never recorded.
  float elapsed_ms(const Event& end) const;

  bool is_recorded() const;
  bool enable_timing() const;
  // The cudaEvent_t (nullptr until first recorded).
  void* handle() const;

 private:
  std::shared_ptr<detail::EventState> state_;
};

}  // namespace tapegrad::cuda
