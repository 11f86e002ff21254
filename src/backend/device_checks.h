// Deferred value checks of the CUDA backend (tapegrad/cuda/checks.h): the record a kernel writes
// when it meets a bad index, target or length, and the message raised when the host reads it.
// Plain C++ so the ops (which name the check) and the CUDA sources share it.
#pragma once

#include <cstdint>
#include <string>

namespace tapegrad::backend {

// What was checked, and so the wording of the message. None: the values were checked before
// (e.g. a backward reusing its forward's indices); the kernel still skips bad ones, silently.
enum class DeviceCheck : int32_t {
  None = 0,
  CrossEntropyTarget,  // value in [0, limit) or == ignore_index
  NllLossTarget,
  IndexSelect,  // value in [0, limit)
  IndexAdd,
  Gather,
  ScatterAdd,
  Embedding,
  LstmLength,  // value in [0, limit - 1]: a sequence length of at most T = limit - 1 steps
};

// One per device, in device memory, zero while no check failed. The first failing kernel thread
// claims it (an atomic compare-and-swap on `check`) and fills in the rest; later failures are
// dropped until the host has read and cleared it. With several bad values in one launch, the one
// reported is whichever thread got there first.
struct DeviceErrorRecord {
  int32_t check = 0;  // a DeviceCheck
  int32_t unused = 0;
  int64_t value = 0, position = 0, limit = 0, ignore_index = 0;
};

// "op: what" for a failed record, worded as the immediate host checks word it.
std::string device_check_message(const DeviceErrorRecord& record);

// Whether an op on a tensor of this device kind checks its values on the host before the kernel
// runs: always on the CPU, on CUDA only with sync checks on.
bool checks_on_host(bool is_cuda);

}  // namespace tapegrad::backend
