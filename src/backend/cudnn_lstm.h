// The kernels of cuDNN's LSTM (the CUDA backend fills them in cuda/cudnn/cudnn_lstm.cpp; on the CPU the
// slot stays empty). They take tapegrad tensors only, so CPU code can include this header; every
// cuDNN type stays inside cuda/.
//
// One call runs the whole stack (all layers, both directions). The op (src/ops/lstm_cudnn.cpp) has
// checked shapes, dtypes and devices, made every tensor contiguous and allocated the outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "tapegrad/core/storage.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad {

// The definition of tapegrad/ops/rnn.h's opaque type: one module's packed weight space, kept
// across calls (CudnnLstmOptions::weight_cache). A call
// reuses it while every weight is still the same contiguous memory at the same version counter
// (optimisers, copies and in-place ops bump it) and the stack's shape and dtype are unchanged;
// otherwise it packs a fresh space and keeps that one, so a backward still pending holds its own.
struct CudnnWeightCache {
  struct Source {
    std::weak_ptr<Storage> storage;
    int64_t offset = 0;
    uint64_t version = 0;
  };
  std::mutex mutex;
  std::vector<Source> sources;   // one per weight, in CudnnLstmForwardArgs::weights's order
  DType dtype = DType::Float32;  // of the packed space
  int64_t input_size = 0, hidden_size = 0, num_layers = 0;
  bool bidirectional = false, has_bias = false;
  std::shared_ptr<Storage> space;
  int64_t packs = 0, reuses = 0;  // calls that packed, and calls that reused the space
};

}  // namespace tapegrad

namespace tapegrad::backend {

// What describes the network (the same in forward and backward).
struct CudnnLstmShape {
  int64_t input_size = 0, hidden_size = 0, num_layers = 1;
  bool bidirectional = false;
  bool has_bias = true;      // bias_ih and bias_hh both present, or both absent
  bool batch_first = false;  // x and y are [B, T, .] instead of [T, B, .]
  double dropout = 0.0;      // on each layer's output but the last; 0 outside training
  // Seeds this thread's cuDNN dropout state on the device the first time dropout is used there;
  // later calls draw on from that state.
  uint64_t dropout_seed = 0;
};

// What forward leaves for backward. The memory is the CUDA backend's and is freed with the last
// reference (the tape node holds one until backward has run).
struct CudnnLstmContext {
  std::shared_ptr<Storage> weight_space;    // the parameters packed in cuDNN's layout
  std::shared_ptr<Storage> reserve_space;   // cuDNN's saved activations (training mode only)
  std::shared_ptr<Storage> dropout_state;   // the random state the dropout masks came from
  std::shared_ptr<Storage> device_lengths;  // int32 [B]: the lengths cuDNN ran with
};

struct CudnnLstmForwardArgs {
  CudnnLstmShape shape;
  // x, hx, cx, the weights and the outputs all have this one dtype: float32, float64, float16 or
  // bfloat16 (the op converts under autocast). float32 runs with TF32 tensor-core math when
  // cuda::allow_tf32() is on, FMA math otherwise; the 16-bit types compute in float32.
  Tensor x;  // [T, B, I] ([B, T, I] with batch_first)
  // [L*D, B, H] each, index k = layer * D + direction; undefined means zeros.
  Tensor hx, cx;
  // Per k = layer * D + direction: weight_ih [4H, in], weight_hh [4H, H], then (with bias)
  // bias_ih [4H], bias_hh [4H]; gate order i, f, g, o.
  std::vector<Tensor> weights;
  // A weight space an earlier forward packed from these same weights (CudnnWeightCache): used as
  // it is, and `weights` may then be empty.
  std::shared_ptr<Storage> packed_weights;
  Tensor lengths;  // int32 [B] on the CPU, each in [0, T]
  // Training mode: keep the reserve space for backward (and apply dropout).
  bool training = false;
  // Outputs, overwritten: y like x but with D*H features, zero at padded steps; hy, cy [L*D, B, H],
  // each sequence's state after its last step.
  Tensor y, hy, cy;
};

struct CudnnLstmBackwardArgs {
  CudnnLstmForwardArgs forward;  // the call being differentiated (its inputs and y)
  CudnnLstmContext context;      // what that call left
  Tensor dy, dhy, dcy;           // gradients of y, hy, cy (same shapes)
  // Overwritten: dx like x, zero at padded steps; dhx, dcx like hx, cx (left undefined when hx,
  // cx are undefined).
  Tensor dx, dhx, dcx;
  // Overwritten, one per entry of forward.weights in the same order; empty when no weight needs
  // a gradient (cuDNN's weight-gradient pass is then skipped).
  std::vector<Tensor> weight_grads;
};

struct CudnnLstmKernels {
  // Packs the weights into a fresh cuDNN weight space and runs cudnnRNNForward; fills *context.
  void (*forward)(const CudnnLstmForwardArgs& args, CudnnLstmContext* context) = nullptr;
  // cudnnRNNBackwardData_v8, then (when weight_grads is not empty) cudnnRNNBackwardWeights_v8
  // into a zeroed gradient space that is scattered into weight_grads.
  void (*backward)(const CudnnLstmBackwardArgs& args) = nullptr;
};

}  // namespace tapegrad::backend
