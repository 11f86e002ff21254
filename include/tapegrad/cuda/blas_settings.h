// Process-wide matrix-product settings of the CUDA backend (available, and harmless, in every
// build). Like PyTorch's torch.backends.cuda.matmul.allow_tf32:
//
//   tapegrad::cuda::set_allow_tf32(true);  // f32 GEMMs may round their inputs to TF32 (10-bit
//                                          // mantissa) on tensor cores: faster, ~1e-3 relative error
#pragma once

namespace tapegrad::cuda {

// Off by default, so f32 products on the GPU keep f32 precision. Thread-safe; applies to GEMMs
// launched after the call.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace tapegrad::cuda
