// Fills the CPU dispatch table: each part registers its own slots (register.h), and the 16-bit
// widening layer goes last, over the float32 kernels the families registered.
#include "cpu/register.h"

namespace tapegrad::backend {

void register_cpu_backend() {
  KernelTable& t = mutable_kernels(DeviceKind::CPU);
  cpu::register_allocator(t);
  cpu::register_copy_fill(t);
  cpu::register_pointwise(t);
  cpu::register_unary(t);
  cpu::register_reduce(t);
  cpu::register_gemm(t);
  cpu::register_softmax(t);
  cpu::register_layer_norm(t);
  cpu::register_indexing(t);
  cpu::register_lstm(t);
  cpu::register_optim(t);
  cpu::register_amp(t);
  cpu::register_16bit_widening(t);
}

}  // namespace tapegrad::backend
