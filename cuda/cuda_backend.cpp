// Registers the CUDA backend's kernels, but only where a device is present: on a machine without
// one every slot stays empty and ops say "no cuda kernel for ... (no CUDA backend)". Each family
// fills its own slots (register.h).
#include "register.h"

namespace tapegrad::backend {

void register_cuda_backend() {
  if (!cuda::is_available()) return;
  KernelTable& table = mutable_kernels(DeviceKind::CUDA);
  using namespace cuda_backend;
  register_memory(table);
  register_copy(table);
  register_fill(table);
  register_random(table);
  register_unary(table);
  register_binary(table);
  register_select(table);
  register_reduce(table);
  register_softmax(table);
  register_layer_norm(table);
  register_cross_entropy(table);
  register_indexing(table);
  register_blas(table);
  register_blas_lt(table);
  register_lstm_recurrence(table);
  register_optim(table);
  register_amp(table);
#if !defined(TAPEGRAD_NO_CUDNN)  // the emulation build has no cuDNN: its slots stay empty
  register_cudnn(table);
#endif
}

}  // namespace tapegrad::backend
