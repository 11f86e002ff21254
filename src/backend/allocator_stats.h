// What the layers above the backends may ask an allocator, without a backend's private header: an
// allocator that counts its blocks implements CountingAllocator, and allocated_bytes() asks the one
// in the kernel table's `allocator` slot. The profiler's memory timeline starts from these counts.
#pragma once

#include <cstdint>

#include "tapegrad/core/device.h"
#include "tapegrad/core/storage.h"

namespace tapegrad::backend {

class CountingAllocator : public Allocator {
 public:
  // Bytes in blocks owned by tensors on `device` now, as this allocator counts them (rounded sizes).
  virtual int64_t allocated_bytes(Device device) = 0;
};

// The count of the registered `allocator` slot of `device`'s kind; 0 when that allocator does not
// count (or the slot is empty).
int64_t allocated_bytes(Device device);

}  // namespace tapegrad::backend
