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
#include "math/op_list.h"
#include "math/optim.h"
#include "math/scalars.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/storage.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::backend {

// The elementwise op kinds, generated from math/op_list.h (one line per op there).
#define TG_OP_ENUMERATOR(Enum, name, Formula) Enum,
enum class UnaryOp { TG_UNARY_OPS(TG_OP_ENUMERATOR) };
enum class BinaryOp { TG_BINARY_OPS(TG_OP_ENUMERATOR) };
enum class CompareOp { TG_COMPARE_OPS(TG_OP_ENUMERATOR) };
#undef TG_OP_ENUMERATOR
enum class ReduceOp { Sum, Mean, Max, Min };

#define TG_OP_COUNT(Enum, name, Formula) +1
constexpr int kNumUnaryOps = 0 TG_UNARY_OPS(TG_OP_COUNT);
constexpr int kNumBinaryOps = 0 TG_BINARY_OPS(TG_OP_COUNT);
constexpr int kNumCompareOps = 0 TG_COMPARE_OPS(TG_OP_COUNT);
#undef TG_OP_COUNT

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* compare_op_name(CompareOp op);

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

// The table of one device kind (both backends registered on first use). While a profiler runs,
// this is a copy whose kernels record profiler events (profiler/profiled_kernels.cpp).
const KernelTable& kernels(DeviceKind kind);
// The registered table itself, never the profiled copy.
const KernelTable& registered_kernels(DeviceKind kind);
const KernelTable& profiled_kernels(DeviceKind kind);
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
