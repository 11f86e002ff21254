// The dispatch table: one typed function-pointer slot per kernel per device kind, the slots
// defined once in backend/kernel_slots.def. Each backend fills its table in an explicit
// register_*_backend() call. An empty slot is an Error naming the
// kernel and device, never a crash or a silent fallback.
//
// Kernel contract: ops have already checked shapes, dtypes and devices, allocated outputs, and
// broadcast inputs (expanded views, stride 0) to the output's shape. Kernels never see gradients
// as such. Unless a kernel's comment says it accumulates, it overwrites its output.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/device_checks.h"
#include "math/ops.h"
#include "math/optim.h"
#include "math/scalars.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/storage.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::backend {

// The elementwise op kinds and the reduction kinds (math/ops.h, generated from math/op_list.h).
using math::binary_op_name;
using math::BinaryOp;
using math::compare_op_name;
using math::CompareOp;
using math::kNumBinaryOps;
using math::kNumCompareOps;
using math::kNumUnaryOps;
using math::ReduceOp;
using math::unary_op_name;
using math::UnaryOp;

// One parameter's tensors for the multi-tensor optimiser slots (undefined where unused).
struct SgdTensors {
  Tensor param, grad, momentum_buffer;
};
struct AdamTensors {
  Tensor param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
  // Capturable Adam: the parameter's step count, float32 [] on its device (undefined otherwise).
  // adam_step_many adds 1 to every one, then takes the bias corrections from the first (the
  // optimiser groups only parameters whose counts are equal).
  Tensor step;
};

struct CudnnLstmKernels;  // backend/cudnn_lstm.h

// One pointer per slot of backend/kernel_slots.def, where each slot's signature and contract are.
struct KernelTable {
#define TG_KERNEL_SLOT(name, filled_by, ...) std::add_pointer_t<__VA_ARGS__> name = nullptr;
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
};

// Who must fill a slot (the middle field of kernel_slots.def).
enum class SlotFill { EveryBackend, NonCpuBackends, Optional };

// Every slot of a table, in kernel_slots.def's order: whether it is filled, and who must fill it.
struct SlotStatus {
  const char* name;
  SlotFill fill;
  bool filled;
};
std::vector<SlotStatus> slot_status(const KernelTable& table);

// The table of one device kind (both backends registered on first use), or, while a decorator is
// installed, the decorator's table of that kind.
const KernelTable& kernels(DeviceKind kind);
// The registered table itself, never a decorator's.
const KernelTable& registered_kernels(DeviceKind kind);
// Installs a decorator: from then on kernels(kind) hands out tables[kind] (an array of
// kNumDeviceKinds tables that lives as long as the program), whose slots typically wrap the
// registered kernels; nullptr removes it. One at a time: the profiler installs its recording tables
// (profiler/profiled_kernels.cpp) while a session runs. A dispatch racing the switch gets either
// table, so a decorator's kernels must stay valid after it is removed.
void set_kernel_decorator(const KernelTable* tables);
inline const KernelTable& kernels(Device device) {
  return kernels(device.kind());
}
// Writable access for a backend's register function.
KernelTable& mutable_kernels(DeviceKind kind);

[[noreturn]] void missing_kernel(const char* kernel, DeviceKind kind);

// Registration entry points, called once by kernels().
void register_cpu_backend();
void register_cuda_backend();  // a no-op in a build without CUDA

}  // namespace tapegrad::backend

// The kernel `slot` of the backend for `device`, or an Error: "no cuda kernel for softmax".
#define TG_KERNEL(device, slot)                                                      \
  ([&]() {                                                                           \
    auto fn_ = ::tapegrad::backend::kernels(device).slot;                            \
    if (fn_ == nullptr) ::tapegrad::backend::missing_kernel(#slot, (device).kind()); \
    return fn_;                                                                      \
  }())
