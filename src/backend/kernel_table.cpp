// The per-device dispatch tables and their one-time registration.
#include "backend/kernel_table.h"

#include <mutex>

#include "profiler/record.h"

namespace tapegrad::backend {

namespace {
KernelTable g_tables[kNumDeviceKinds];
std::once_flag g_registered;
}  // namespace

KernelTable& mutable_kernels(DeviceKind kind) {
  return g_tables[static_cast<int>(kind)];
}

const KernelTable& registered_kernels(DeviceKind kind) {
  std::call_once(g_registered, [] {
    register_cpu_backend();
    register_cuda_backend();
  });
  return g_tables[static_cast<int>(kind)];
}

const KernelTable& kernels(DeviceKind kind) {
  // The one branch a dispatch pays for the profiler.
  if (profiler::detail::active()) return profiled_kernels(kind);
  return registered_kernels(kind);
}

void missing_kernel(const char* kernel, DeviceKind kind) {
  detail::throw_error(detail::str_cat(
      "no ", device_kind_name(kind), " kernel for ", kernel,
      kind == DeviceKind::CUDA && !cuda::is_available() ? " (this build or machine has no CUDA backend)" : ""));
}

#define TG_OP_NAME(Enum, name, Formula) \
  case Kind::Enum:                      \
    return name;

const char* unary_op_name(UnaryOp op) {
  using Kind = UnaryOp;
  switch (op) { TG_UNARY_OPS(TG_OP_NAME) }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  using Kind = BinaryOp;
  switch (op) { TG_BINARY_OPS(TG_OP_NAME) }
  return "?";
}

const char* compare_op_name(CompareOp op) {
  using Kind = CompareOp;
  switch (op) { TG_COMPARE_OPS(TG_OP_NAME) }
  return "?";
}

#undef TG_OP_NAME

std::vector<SlotStatus> slot_status(const KernelTable& table) {
  return {
#define TG_KERNEL_SLOT(name, filled_by, ...) {#name, SlotFill::filled_by, table.name != nullptr},
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
  };
}

}  // namespace tapegrad::backend
