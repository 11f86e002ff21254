// Registers the CUDA backend's kernels, but only where a device is present: on a machine without
// one every slot stays empty and ops say "no cuda kernel for ... (no CUDA backend)". Each family
// fills its own slots; the list of families is generated from the sources this build compiles
// (register.h), so the emulation build, which leaves out cudnn/, registers no cuDNN slots.
#include "register.h"

namespace tapegrad::backend {

void register_cuda_backend() {
  if (!cuda::is_available()) return;
  KernelTable& table = mutable_kernels(DeviceKind::CUDA);
#define TG_KERNEL_FAMILY(family) cuda_backend::register_##family(table);
#include "cuda_kernel_families.inc"
#undef TG_KERNEL_FAMILY
}

}  // namespace tapegrad::backend
