// Fills the CPU dispatch table: every kernel family registers its own slots (register.h, the list
// generated from the sources), then the 16-bit widening layer wraps the float32 kernels they left.
#include "cpu/register.h"

namespace tapegrad::backend {

void register_cpu_backend() {
  KernelTable& t = mutable_kernels(DeviceKind::CPU);
#define TG_KERNEL_FAMILY(family) cpu::register_##family(t);
#include "cpu_kernel_families.inc"
#undef TG_KERNEL_FAMILY
  cpu::register_16bit_widening(t);
}

}  // namespace tapegrad::backend
