// The weights of a CPU LSTM layer in the layouts its recurrence multiplies by, reused inside a
// WeightLayoutScope (Note [kept weight layouts], backend/weight_layouts.h).
#pragma once

#include <memory>

#include "cpu/gemm/sbgemm.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// What the forward recurrence reads: w_t = [W_ih^T; W_hh^T] as one [I + H, 4H] matrix, its bf16
// packing when the products run in bf16, and b_ih + b_hh (undefined: no bias).
struct ForwardWeights {
  Tensor w_t;
  PackedBf16Matrix w_t_bf16;
  Tensor bias;
};
std::shared_ptr<const ForwardWeights> forward_weights(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                      const Tensor& b_hh, DType products);

// W_hh [4H, H] packed for the backward's bf16 products dh_prev += dgates W_hh.
std::shared_ptr<const PackedBf16Matrix> backward_w_hh_bf16(const Tensor& w_hh);

}  // namespace tapegrad::cpu
