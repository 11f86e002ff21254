// Device side of the deferred value checks (Note [deferred checks] in device_checks.h).
// Shared by the kernels that check values as they read them (indexing.cu, cross_entropy.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/device_checks.h"

namespace tapegrad::cuda_backend {

// What a kernel needs to report a bad value: the device's record and what the value is checked
// for. A null record (check None) reports nothing.
struct CheckSite {
  backend::DeviceErrorRecord* record = nullptr;
  int32_t check = 0;
  int64_t limit = 0, ignore_index = 0;
};

// Notes `value` (at `position`) as the device's error unless an earlier one is recorded already.
__device__ inline void report_bad_value(const CheckSite& site, int64_t value, int64_t position) {
  if (site.record == nullptr) return;
  if (atomicCAS(&site.record->check, 0, site.check) != 0) return;
  site.record->value = value;
  site.record->position = position;
  site.record->limit = site.limit;
  site.record->ignore_index = site.ignore_index;
}

}  // namespace tapegrad::cuda_backend
