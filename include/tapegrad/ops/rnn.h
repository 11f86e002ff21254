// One LSTM layer in one direction as a single op (one tape node). The input projection for all
// timesteps is one GEMM; each step is one recurrent GEMM plus one fused cell kernel; backward runs
// one fused cell kernel and one GEMM per step, then the weight gradients as large GEMMs.
// lstm_cudnn is the alternative on CUDA: the whole multi-layer stack through cuDNN, one node.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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

// The whole stack (all layers, both directions) through cuDNN's RNN API: one cuDNN call forward,
// two backward, and one tape node. An alternative to stacking lstm_layer ops, for CUDA tensors
// only; nn::LSTM selects it with LSTMOptions::implementation(LstmImplementation::CuDNN).

// cuDNN's packed copy of one set of weights, kept across calls: reused while none of the weights
// has changed (their version counters), repacked after an optimiser step or any other write.
// nn::LSTM holds one; a caller of lstm_cudnn may pass one per set of weights, or none.
struct CudnnWeightCache;
std::shared_ptr<CudnnWeightCache> make_cudnn_weight_cache();

struct CudnnLstmOptions {
  int64_t num_layers = 1;
  bool bidirectional = false;
  bool batch_first = false;
  double dropout = 0.0;       // in [0, 1): on each layer's output but the last; pass 0 outside training
  uint64_t dropout_seed = 0;  // seeds this thread's cuDNN dropout state the first time one is made
  std::shared_ptr<CudnnWeightCache> weight_cache;  // null: pack the weights on every call
};

struct LstmStackOutput {
  Tensor output;  // [T, B, D*H] ([B, T, D*H] with batch_first), D = 2 when bidirectional; zero at padded steps
  Tensor h_n;     // [L*D, B, H]: each sequence's state after its last step, index layer * D + direction
  Tensor c_n;     // [L*D, B, H]
};

// x [T, B, I] ([B, T, I] with batch_first); h0, c0 [L*D, B, H] or undefined (zeros). `weights`
// lists, for each layer and direction in the order above, weight_ih [4H, in] and weight_hh [4H, H],
// followed by bias_ih [4H] and bias_hh [4H] when the stack has biases (all of them or none); in is
// I for layer 0 and D*H above. Gate order i, f, g, o. `lengths` (int32/int64 [B] in [0, T], any
// device) makes the steps t >= length padding, as in lstm_layer. float32 (TF32 math when
// cuda::allow_tf32() is on), float64, float16 and bfloat16 (float32 math); under autocast, float32
// tensors run in the autocast type and the outputs and gradients come back as float32.
// Throws tapegrad::Error for CPU tensors, a build or machine without CUDA, mismatched shapes,
// dtypes or devices, and any failing cuDNN call (naming the call and its status).
LstmStackOutput lstm_cudnn(const Tensor& x, const Tensor& h0, const Tensor& c0, const std::vector<Tensor>& weights,
                           const CudnnLstmOptions& options, const Tensor& lengths = Tensor());

}  // namespace tapegrad
