// The per-device dispatch tables and their one-time registration.
#include "backend/kernel_table.h"

#include <atomic>
#include <mutex>

#include "backend/allocator_stats.h"

namespace tapegrad::backend {

namespace {
KernelTable g_tables[kNumDeviceKinds];
std::once_flag g_registered;
std::atomic<const KernelTable*> g_decorator{nullptr};
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
  // The one branch a dispatch pays for a decorator (the profiler's).
  if (const KernelTable* decorated = g_decorator.load(std::memory_order_acquire))
    return decorated[static_cast<int>(kind)];
  return registered_kernels(kind);
}

void set_kernel_decorator(const KernelTable* tables) {
  g_decorator.store(tables, std::memory_order_release);
}

int64_t allocated_bytes(Device device) {
  auto* counting = dynamic_cast<CountingAllocator*>(registered_kernels(device.kind()).allocator);
  return counting != nullptr ? counting->allocated_bytes(device) : 0;
}

void missing_kernel(const char* kernel, DeviceKind kind) {
  detail::throw_error(detail::str_cat(
      "no ", device_kind_name(kind), " kernel for ", kernel,
      kind == DeviceKind::CUDA && !cuda::is_available() ? " (this build or machine has no CUDA backend)" : ""));
}

std::vector<SlotStatus> slot_status(const KernelTable& table) {
  return {
#define TG_KERNEL_SLOT(name, filled_by, ...) {#name, SlotFill::filled_by, table.name != nullptr},
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
  };
}

}  // namespace tapegrad::backend
