// LSTM and LSTMCell with PyTorch's parameter names (weight_ih_l0, weight_hh_l0_reverse, ...),
// gate order i, f, g, o, and initialisation U(-1/sqrt(H), 1/sqrt(H)). Each layer and direction is
// one lstm_layer op (one tape node), see tapegrad/ops/rnn.h.
//
// LSTM can run on one of two implementations, chosen per module with LSTMOptions::implementation:
//   LstmImplementation::Fused (the default): our lstm_layer ops, on the CPU and on CUDA.
//   LstmImplementation::CuDNN: the whole stack as one lstm_cudnn op (cuDNN's RNN API); CUDA tensors
//     only, float32/float64. forward() on CPU tensors throws tapegrad::Error. The parameters, their
//     names and the state dict are the same under both; each forward packs the weights into cuDNN's
//     layout (one device copy of the weights, see docs/cudnn_lstm.md). Dropout then uses cuDNN's
//     own random state, so its masks differ from the fused implementation's.
//
//   nn::LSTM lstm(64, 128, nn::LSTMOptions().num_layers(2).implementation(nn::LstmImplementation::CuDNN));
//   lstm.to(kCUDA);
//
// Gradient checkpointing (PyTorch's LSTM has no such option; see docs/amp.md, "checkpoint"):
// instead of keeping every step's gates and states until backward, the fused implementation can
// keep only some states and recompute the rest in backward with checkpoint()
// (tapegrad/autograd/checkpoint.h):
//   checkpoint_layers(true): each layer (its directions and the dropout after it) is recomputed;
//     only the layers' outputs and final states are kept.
//   checkpoint_segments(s): each layer's steps are split into s consecutive runs of about T/s
//     steps, each recomputed; only the states at run boundaries (and each layer's output) are
//     kept. Turns checkpointing on by itself when s > 1. With s > 1 the dropout between layers
//     runs outside the runs and keeps its mask.
//   nn::LSTM lstm(256, 512, nn::LSTMOptions().checkpoint_segments(8));
// As in checkpoint_sequential, the run computed last (the last layer, or its last run) is not
// recomputed: its backward comes first, so recomputing it would lower no peak. Hence with one
// layer checkpoint_layers(true) changes nothing. Dropout masks are replayed (also from a generator
// passed to the constructor), so the gradients are those of the plain module: bit-identical with
// checkpoint_layers; with s > 1 the weight gradients are summed over the runs instead of in one
// product, so they agree to rounding. Nothing changes with grad mode off (the plain forward runs).
// The CuDNN implementation does not support it (the constructor throws).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tapegrad/core/generator.h"
#include "tapegrad/nn/module.h"

namespace tapegrad {
struct CudnnWeightCache;  // tapegrad/ops/rnn.h
namespace backend {
class WeightLayouts;  // src/backend/weight_layouts.h
}
}  // namespace tapegrad

namespace tapegrad::nn {

enum class LstmImplementation { Fused, CuDNN };

struct LSTMOptions {
  LSTMOptions& num_layers(int64_t v) {
    num_layers_ = v;
    return *this;
  }
  LSTMOptions& bias(bool v) {
    bias_ = v;
    return *this;
  }
  LSTMOptions& batch_first(bool v) {
    batch_first_ = v;
    return *this;
  }
  LSTMOptions& dropout(double v) {
    dropout_ = v;
    return *this;
  }  // between layers, while training
  LSTMOptions& bidirectional(bool v) {
    bidirectional_ = v;
    return *this;
  }
  LSTMOptions& implementation(LstmImplementation v) {
    implementation_ = v;
    return *this;
  }  // see above
  LSTMOptions& checkpoint_layers(bool v) {
    checkpoint_layers_ = v;
    return *this;
  }  // see above
  LSTMOptions& checkpoint_segments(int64_t v) {
    checkpoint_segments_ = v;
    return *this;
  }  // >= 1, see above
  int64_t num_layers_ = 1;
  bool bias_ = true, batch_first_ = false;
  double dropout_ = 0.0;
  bool bidirectional_ = false;
  LstmImplementation implementation_ = LstmImplementation::Fused;
  bool checkpoint_layers_ = false;
  int64_t checkpoint_segments_ = 1;
};

struct LSTMOutput {
  Tensor output;  // [T, B, D*H] ([B, T, D*H] with batch_first); zero at padded steps
  Tensor h_n;     // [num_layers * D, B, H], D = 2 when bidirectional
  Tensor c_n;
};

class LSTM : public Module {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, const LSTMOptions& options = {}, Generator* generator = nullptr);
  // input [T, B, I] (or [B, T, I] with batch_first); h0, c0 [num_layers * D, B, H] or undefined
  // (zeros); lengths int64 [B] or undefined (all T steps valid).
  LSTMOutput forward(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor(),
                     const Tensor& lengths = Tensor());
  // forward(), then the forward hooks with inputs {input, h0, c0, lengths} (undefined ones
  // included) and outputs {output, h_n, c_n}.
  LSTMOutput operator()(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor(),
                        const Tensor& lengths = Tensor());
  std::string name() const override { return "LSTM"; }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  const LSTMOptions& options() const { return options_; }
  // A new LSTM of layers [first, last) of this one, with copies of their weights (renamed from _l0)
  // on this one's device and dtype and the same options; e.g. one stage of a pipeline
  // (tapegrad/distributed/pipeline.h). The dropout this LSTM applies after layer last - 1 (when it
  // is not the last) is not part of the slice. Throws for an empty or out-of-range range.
  std::shared_ptr<LSTM> slice_layers(int64_t first, int64_t last) const;
  LstmImplementation implementation() const { return options_.implementation_; }

 protected:
  std::string extra_repr() const override;

 private:
  LSTMOutput forward_cudnn(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths);
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  int64_t input_size_, hidden_size_;
  LSTMOptions options_;
  Generator* generator_;
  std::vector<std::vector<Weights>> weights_;                  // [layer][direction]
  std::shared_ptr<CudnnWeightCache> cudnn_weights_;            // the CuDNN implementation's packed weights
  std::shared_ptr<backend::WeightLayouts> inference_layouts_;  // kept across calls under InferenceMode
};

// One step: (h', c') = cell(x [B, I], (h, c) [B, H]); undefined h/c mean zeros.
class LSTMCell : public Module {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true, Generator* generator = nullptr);
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& h = Tensor(), const Tensor& c = Tensor());
  // forward(), then the forward hooks with inputs {input, h, c} and outputs {h', c'}.
  std::pair<Tensor, Tensor> operator()(const Tensor& input, const Tensor& h = Tensor(), const Tensor& c = Tensor());
  std::string name() const override { return "LSTMCell"; }
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 private:
  int64_t hidden_size_;
};

}  // namespace tapegrad::nn
