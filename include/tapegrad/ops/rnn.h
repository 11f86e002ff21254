// One LSTM layer in one direction as a single op (one tape node). The input projection for all
// timesteps is one GEMM; each step is one recurrent GEMM plus one fused cell kernel; backward runs
// one fused cell kernel and one GEMM per step, then the weight gradients as large GEMMs.
#pragma once

#include "tapegrad/core/tensor.h"

namespace tapegrad {

struct LstmLayerOutput {
  Tensor output;  // [T, B, H]; zero at the padded steps of shorter sequences
  Tensor h_n;     // [B, H]: each sequence's state after its last step
  Tensor c_n;     // [B, H]
};

// x [T, B, I] (time-major); h0, c0 [B, H]; w_ih [4H, I]; w_hh [4H, H]; b_ih, b_hh [4H] or undefined.
// Gate order i, f, g, o (PyTorch's). `lengths` (int64 [B], values in [0, T]) makes steps t >= length
// padding: they neither change the state nor receive gradient. `reverse` runs from the last valid
// step of each sequence back to its first. Throws on mismatched shapes, dtypes or devices.
LstmLayerOutput lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                           const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor(),
                           const Tensor& lengths = Tensor(), bool reverse = false);

}  // namespace tapegrad
