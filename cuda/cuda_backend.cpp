// Registers the CUDA backend's kernels, but only where a device is present: on a machine without
// one every slot stays empty and ops say "no cuda kernel for ... (no CUDA backend)".
#include "cuda_kernels.h"

namespace tapegrad::backend {

void register_cuda_backend() {
  if (!cuda::is_available()) return;
  KernelTable& table = mutable_kernels(DeviceKind::CUDA);
  cuda_backend::register_memory(table);
  cuda_backend::register_pointwise(table);
  cuda_backend::register_reductions(table);
  cuda_backend::register_blas(table);
  cuda_backend::register_blas_lt(table);
  cuda_backend::register_lstm_recurrence(table);
  cuda_backend::register_optim(table);
  cuda_backend::register_amp(table);
#if !defined(TAPEGRAD_NO_CUDNN)  // the emulation build has no cuDNN: its slots stay empty
  cuda_backend::register_cudnn(table);
#endif
}

}  // namespace tapegrad::backend
