// Deferred value checks on the GPU (tapegrad/cuda/checks.h): the per-device error record kernels
// write into, and its reading at the synchronisations the host makes anyway.
//
// Note [deferred checks]: a kernel that reads indices or targets checks them as it goes; a bad one
// is skipped (never read or written through) and noted in the device's DeviceErrorRecord. Nothing
// waits for that. Launches that may report mark their device "pending"; a later synchronising call
// (a copy to the CPU, Stream/Event/device synchronize) queues a copy of the record into pinned
// memory just before its own wait, or reads it right after a device-wide wait, and raises the
// recorded Error after the wait. A device with nothing pending costs those calls nothing.
#pragma once

#include <cuda_runtime.h>

#include "backend/device_checks.h"
#include "tapegrad/core/storage.h"

namespace tapegrad::cuda_backend {

// The record of `device` for a kernel about to launch on `stream` that may report into it
// (allocated, zeroed, at the first call); marks the device pending.
backend::DeviceErrorRecord* error_record(int device, cudaStream_t stream);

// Around a wait for `stream` of `device` that the caller makes anyway:
//   DeferredErrorRead read(device, stream);   // queues the record's copy if anything is pending
//   cudaStreamSynchronize(stream);
//   read.raise_if_failed();                    // throws the recorded Error, clearing the record
class DeferredErrorRead {
 public:
  DeferredErrorRead(int device, cudaStream_t stream);
  void raise_if_failed();

 private:
  int device_;
  cudaStream_t stream_;
  DataPtr host_;  // pinned; empty when nothing was pending
};

// After a wait that covered the whole device (device_wide: cuda::synchronize) or an unknown part
// of it (an event): reads the record if anything is pending and raises what it holds.
void raise_device_errors(int device, bool device_wide);

}  // namespace tapegrad::cuda_backend
