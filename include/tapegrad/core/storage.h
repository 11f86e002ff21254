// Storage: reference-counted bytes on one device, obtained from that device's Allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "tapegrad/core/device.h"

namespace tapegrad {

// A block of device memory and the function that gives it back.
struct DataPtr {
  void* ptr = nullptr;
  std::function<void(void*)> deleter;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least nbytes on `device` (a zero-byte request may return nullptr); throws
  // tapegrad::Error when out of memory or when `device` is not one this allocator serves.
  virtual DataPtr allocate(size_t nbytes, Device device) = 0;
};

class Storage {
 public:
  Storage(size_t nbytes, Device device, Allocator& allocator);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the last tensor lets go.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_.ptr; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Bumped by every in-place write, so autograd can tell that a saved tensor was modified; not
  // for inference storage, which nothing saved can read.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() {
    if (!inference_) version_.fetch_add(1, std::memory_order_relaxed);
  }
  // Made under InferenceMode (tapegrad/autograd/grad_mode.h): its tensors are inference tensors.
  bool is_inference() const { return inference_; }

 private:
  DataPtr data_;
  size_t nbytes_;
  Device device_;
  std::atomic<uint64_t> version_{0};
  bool inference_;
};

}  // namespace tapegrad
