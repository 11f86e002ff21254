// The LSTM modules: parameter bookkeeping and the stacking of lstm_layer ops over layers and
// directions.
#include "tapegrad/nn/lstm.h"

#include <cmath>

#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/dropout.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/join.h"
#include "tapegrad/ops/rnn.h"

namespace tapegrad::nn {

namespace {
Tensor uniform_parameter(const Shape& shape, double bound, Generator* generator) {
  Tensor t = empty(shape);
  uniform_(t, -bound, bound, generator);
  return t;
}
}  // namespace

LSTM::LSTM(int64_t input_size, int64_t hidden_size, const LSTMOptions& options, Generator* generator)
    : input_size_(input_size), hidden_size_(hidden_size), options_(options), generator_(generator) {
  TG_CHECK(input_size > 0 && hidden_size > 0, "LSTM: input_size and hidden_size must be positive, got ", input_size,
           " and ", hidden_size);
  TG_CHECK(options.num_layers_ >= 1, "LSTM: num_layers must be >= 1, got ", options.num_layers_);
  TG_CHECK(options.dropout_ >= 0 && options.dropout_ <= 1, "LSTM: dropout must be in [0, 1], got ", options.dropout_);
  const int64_t directions = options.bidirectional_ ? 2 : 1;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t layer = 0; layer < options.num_layers_; ++layer) {
    std::vector<Weights> per_direction;
    const int64_t in = layer == 0 ? input_size : hidden_size * directions;
    for (int64_t d = 0; d < directions; ++d) {
      std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      Weights w;
      w.w_ih = register_parameter("weight_ih" + suffix, uniform_parameter({4 * hidden_size, in}, bound, generator));
      w.w_hh = register_parameter("weight_hh" + suffix, uniform_parameter({4 * hidden_size, hidden_size}, bound, generator));
      if (options.bias_) {
        w.b_ih = register_parameter("bias_ih" + suffix, uniform_parameter({4 * hidden_size}, bound, generator));
        w.b_hh = register_parameter("bias_hh" + suffix, uniform_parameter({4 * hidden_size}, bound, generator));
      }
      per_direction.push_back(w);
    }
    weights_.push_back(per_direction);
  }
}

LSTMOutput LSTM::operator()(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths) {
  LSTMOutput out = forward(input, h0, c0, lengths);
  if (has_forward_hooks()) run_forward_hooks({input, h0, c0, lengths}, {out.output, out.h_n, out.c_n});
  return out;
}

LSTMOutput LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths) {
  TG_CHECK(input.defined() && input.dim() == 3, "LSTM: input must be 3-D (", options_.batch_first_ ? "[B, T, I]" : "[T, B, I]",
           "), got ", input.defined() ? shape_str(input.sizes()) : std::string("undefined"));
  Tensor x = options_.batch_first_ ? input.transpose(0, 1) : input;
  TG_CHECK(x.size(2) == input_size_, "LSTM: input has ", x.size(2), " features, expected ", input_size_);
  const int64_t directions = options_.bidirectional_ ? 2 : 1;
  const int64_t layers = options_.num_layers_, batch = x.size(1);
  const Shape state_shape{layers * directions, batch, hidden_size_};
  const TensorOptions like = TensorOptions(x.dtype()).device(x.device());
  for (const Tensor* s : {&h0, &c0})
    if (s->defined())
      TG_CHECK(s->sizes() == state_shape, "LSTM: initial state ", shape_str(s->sizes()), " should be ",
               shape_str(state_shape));
  if (options_.implementation_ == LstmImplementation::CuDNN) return forward_cudnn(input, h0, c0, lengths);
  Tensor zero_state = zeros({batch, hidden_size_}, like);

  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t k = layer * directions + d;
      const Weights& w = weights_[static_cast<size_t>(layer)][static_cast<size_t>(d)];
      LstmLayerOutput r = lstm_layer(layer_input, h0.defined() ? h0.select(0, k) : zero_state,
                                     c0.defined() ? c0.select(0, k) : zero_state, w.w_ih, w.w_hh, w.b_ih, w.b_hh,
                                     lengths, d == 1);
      outputs.push_back(r.output);
      h_n.push_back(r.h_n);
      c_n.push_back(r.c_n);
    }
    layer_input = directions == 1 ? outputs[0] : cat(outputs, 2);
    if (layer + 1 < layers) layer_input = dropout(layer_input, options_.dropout_, is_training(), generator_);
  }
  LSTMOutput out;
  out.output = options_.batch_first_ ? layer_input.transpose(0, 1) : layer_input;
  out.h_n = stack(h_n, 0);
  out.c_n = stack(c_n, 0);
  return out;
}

// The whole stack as one lstm_cudnn op, on the same parameter tensors (packed by the op).
LSTMOutput LSTM::forward_cudnn(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths) {
  std::vector<Tensor> weights;
  for (const std::vector<Weights>& layer : weights_) {
    for (const Weights& w : layer) {
      weights.push_back(w.w_ih);
      weights.push_back(w.w_hh);
      if (options_.bias_) {
        weights.push_back(w.b_ih);
        weights.push_back(w.b_hh);
      }
    }
  }
  CudnnLstmOptions cudnn;
  cudnn.num_layers = options_.num_layers_;
  cudnn.bidirectional = options_.bidirectional_;
  cudnn.batch_first = options_.batch_first_;
  cudnn.dropout = is_training() ? options_.dropout_ : 0.0;
  if (cudnn.dropout > 0 && cudnn.num_layers > 1) {
    Generator::Draw draw = (generator_ != nullptr ? *generator_ : default_generator()).reserve(1);
    cudnn.dropout_seed = draw.seed ^ (draw.offset * 0x9E3779B97F4A7C15ULL);
  }
  LstmStackOutput r = lstm_cudnn(input, h0, c0, weights, cudnn, lengths);
  return LSTMOutput{r.output, r.h_n, r.c_n};
}

std::string LSTM::extra_repr() const {
  std::string s = std::to_string(input_size_) + ", " + std::to_string(hidden_size_);
  if (options_.num_layers_ != 1) s += ", num_layers=" + std::to_string(options_.num_layers_);
  if (!options_.bias_) s += ", bias=false";
  if (options_.batch_first_) s += ", batch_first=true";
  if (options_.dropout_ != 0) s += ", dropout=" + std::to_string(options_.dropout_);
  if (options_.bidirectional_) s += ", bidirectional=true";
  if (options_.implementation_ == LstmImplementation::CuDNN) s += ", implementation=cudnn";
  return s;
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias, Generator* generator) : hidden_size_(hidden_size) {
  TG_CHECK(input_size > 0 && hidden_size > 0, "LSTMCell: input_size and hidden_size must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weight_ih = register_parameter("weight_ih", uniform_parameter({4 * hidden_size, input_size}, bound, generator));
  weight_hh = register_parameter("weight_hh", uniform_parameter({4 * hidden_size, hidden_size}, bound, generator));
  if (bias) {
    bias_ih = register_parameter("bias_ih", uniform_parameter({4 * hidden_size}, bound, generator));
    bias_hh = register_parameter("bias_hh", uniform_parameter({4 * hidden_size}, bound, generator));
  }
}

std::pair<Tensor, Tensor> LSTMCell::operator()(const Tensor& input, const Tensor& h, const Tensor& c) {
  std::pair<Tensor, Tensor> out = forward(input, h, c);
  if (has_forward_hooks()) run_forward_hooks({input, h, c}, {out.first, out.second});
  return out;
}

std::pair<Tensor, Tensor> LSTMCell::forward(const Tensor& input, const Tensor& h, const Tensor& c) {
  TG_CHECK(input.defined() && input.dim() == 2, "LSTMCell: input must be [B, I]");
  Tensor zero = zeros({input.size(0), hidden_size_}, TensorOptions(input.dtype()).device(input.device()));
  LstmLayerOutput r = lstm_layer(input.unsqueeze(0), h.defined() ? h : zero, c.defined() ? c : zero, weight_ih,
                                 weight_hh, bias_ih, bias_hh);
  return {r.h_n, r.c_n};
}

}  // namespace tapegrad::nn
