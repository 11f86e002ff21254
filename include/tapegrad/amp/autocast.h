// Autocast: mixed precision as a per-thread policy, like torch.autocast. Inside an
// AutocastGuard(kCPU, kBFloat16) the ops that the policy lists run their products in bf16 with f32
// accumulation, and everything else runs as before. Guards nest (the innermost wins) and belong to
// the thread that made them.
//
// The policy, as PyTorch's, is one list: src/amp/policy.def (shown in docs/amp.md) names each op it
// changes and its category. Lower-precision ops take float32 or low-type operands, multiply them
// rounded to the low type with float32 sums, and return the low type (the LSTM keeps its gates,
// cell state and outputs in float32); float32 ops convert 16-bit inputs to float32; other ops run
// in their inputs' type. Master weights and their gradients stay float32. Backward uses the
// precision its forward chose, whatever autocast says when it runs. CPU products use Intel AMX or
// AVX512-BF16 where the CPU has them; CUDA's are cuBLAS GEMMs of bf16/f16 operands with float32
// sums. The cuDNN LSTM (LstmImplementation::CuDNN) is not lowered.
#pragma once

#include "tapegrad/core/device.h"
#include "tapegrad/core/dtype.h"

namespace tapegrad::amp {

class AutocastGuard {
 public:
  // device: the device kind whose ops it affects (kCPU or kCUDA, every GPU); dtype: the
  // low-precision type (kBFloat16 on the CPU; kBFloat16 or kFloat16 on CUDA). enabled = false turns autocast off inside
  // the guard, as a nested torch.autocast(enabled=False) does.
  explicit AutocastGuard(const Device& device, DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceKind kind_;
  bool saved_enabled_;
  DType saved_dtype_;
};

// Whether autocast is on for `kind` in this thread, and its low-precision type.
bool is_autocast_enabled(DeviceKind kind);
DType autocast_dtype(DeviceKind kind);

// The type an op listed by the policy runs its products in for inputs of `dtype` on `device`: the
// autocast type when autocast is on there and dtype is float32, else dtype itself.
DType product_dtype(const Device& device, DType dtype);

// Which kernel the CPU's bf16 products use on this machine: "amx" (Intel AMX tiles),
// "avx512-bf16" (vdpbf16ps) or "portable" (operands rounded, then an f32 product).
const char* cpu_bf16_product_kernel();

}  // namespace tapegrad::amp
