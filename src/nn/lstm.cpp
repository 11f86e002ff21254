// The LSTM modules: parameter bookkeeping and the stacking of lstm_layer ops over layers and
// directions, optionally through checkpoint() per layer or per run of steps.
#include "tapegrad/nn/lstm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "backend/kernel_table.h"
#include "backend/weight_layouts.h"
#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/grad_mode.h"
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

// What one layer's forward needs, held by value so that a recomputation in backward depends on
// nothing the module may change meanwhile (e.g. train()/eval()).
struct LayerRun {
  std::vector<std::array<Tensor, 4>> weights;  // per direction: w_ih, w_hh, b_ih, b_hh
  double dropout = 0;                          // applied after the layer when > 0 (not the last layer)
  bool training = false;
  Generator* generator = nullptr;
  int64_t directions() const { return static_cast<int64_t>(weights.size()); }
};

// One layer, every direction, then the dropout: {output, h_n per direction..., c_n per direction...}.
std::vector<Tensor> layer_forward(const LayerRun& run, const Tensor& input, const std::vector<Tensor>& h0,
                                  const std::vector<Tensor>& c0, const Tensor& lengths) {
  const size_t directions = run.weights.size();
  std::vector<Tensor> outputs, result(1 + 2 * directions);
  for (size_t d = 0; d < directions; ++d) {
    const std::array<Tensor, 4>& w = run.weights[d];
    LstmLayerOutput r = lstm_layer(input, h0[d], c0[d], w[0], w[1], w[2], w[3], lengths, d == 1);
    outputs.push_back(r.output);
    result[1 + d] = r.h_n;
    result[1 + directions + d] = r.c_n;
  }
  result[0] = directions == 1 ? outputs[0] : cat(outputs, 2);
  if (run.dropout > 0) result[0] = dropout(result[0], run.dropout, run.training, run.generator);
  return result;
}

// The whole layer through checkpoint(): inputs {input, h0 per direction..., c0 per direction...}.
std::vector<Tensor> layer_forward_checkpointed(const LayerRun& run, const Tensor& input, const std::vector<Tensor>& h0,
                                               const std::vector<Tensor>& c0, const Tensor& lengths) {
  // checkpoint() replays every generator's draws (the module's own too), also when this call is
  // itself inside an outer checkpoint's recomputation.
  CheckpointFunction fn = [run, lengths](const std::vector<Tensor>& in) {
    const auto d = static_cast<std::ptrdiff_t>(run.weights.size());
    std::vector<Tensor> h(in.begin() + 1, in.begin() + 1 + d), c(in.begin() + 1 + d, in.end());
    return layer_forward(run, in[0], h, c, lengths);
  };
  std::vector<Tensor> inputs{input};
  inputs.insert(inputs.end(), h0.begin(), h0.end());
  inputs.insert(inputs.end(), c0.begin(), c0.end());
  return checkpoint(fn, inputs, /*preserve_rng_state=*/true);
}

// Each sequence's length within steps [begin, end): its valid steps there, counted from begin.
// Computed where the lengths are (int64), so lengths on the GPU are never read back.
Tensor run_lengths(const Tensor& lengths, int64_t begin, int64_t end) {
  return clamp(sub(lengths, static_cast<double>(begin)), 0.0, static_cast<double>(end - begin));
}

// The layer with its steps in `runs` consecutive runs per direction, each through checkpoint()
// except the one computed last when `keep_last` (the last layer's, whose backward comes first).
// The forward direction carries its state from run r to r + 1, the reverse one from r + 1 to r
// (with lengths, a sequence that ends before a run passes its state through it unchanged).
std::vector<Tensor> layer_forward_segmented(const LayerRun& run, const Tensor& input, const std::vector<Tensor>& h0,
                                            const std::vector<Tensor>& c0, const Tensor& lengths, int64_t runs,
                                            bool keep_last) {
  const int64_t steps = input.size(0), directions = run.directions();
  Tensor all_lengths;
  if (lengths.defined()) {
    TG_CHECK(lengths.dim() == 1 && lengths.size(0) == input.size(1), "LSTM: lengths must be [", input.size(1),
             "], got ", shape_str(lengths.sizes()));
    TG_CHECK(lengths.dtype() == kInt64 || lengths.dtype() == kInt32, "LSTM: lengths must be integers, got ",
             lengths.dtype());
    all_lengths = lengths.detach().to(input.device(), kInt64).contiguous();
    if (backend::checks_on_host(all_lengths.device().is_cuda())) {
      for (int64_t v : all_lengths.tolist<int64_t>())
        TG_CHECK(v >= 0 && v <= steps, "LSTM: sequence length ", v, " is outside [0, ", steps, "]");
    } else {
      auto check_values = TG_KERNEL(all_lengths.device(), check_values);
      check_values(all_lengths, steps + 1, std::numeric_limits<int64_t>::min(), backend::DeviceCheck::LstmLength);
    }
  }
  std::vector<Tensor> outputs, result(static_cast<size_t>(1 + 2 * directions));
  for (int64_t d = 0; d < directions; ++d) {
    const std::array<Tensor, 4>& w = run.weights[static_cast<size_t>(d)];
    const bool reverse = d == 1;
    std::vector<Tensor> pieces(static_cast<size_t>(runs));
    Tensor h = h0[static_cast<size_t>(d)], c = c0[static_cast<size_t>(d)];
    // The runs share their weights' layout (Note [kept weight layouts]), freed as they end, before
    // the output is joined. Only the forward's runs: each recomputation, in backward, makes its
    // own, so no layout is live while a run's backward holds its recomputed activations.
    {
      backend::WeightLayoutScope layout_scope(std::make_shared<backend::WeightLayouts>());
      for (int64_t i = 0; i < runs; ++i) {
        const int64_t r = reverse ? runs - 1 - i : i;
        const int64_t begin = r * steps / runs, end = (r + 1) * steps / runs;
        Tensor lens = lengths.defined() ? run_lengths(all_lengths, begin, end) : Tensor();
        CheckpointFunction fn = [w, lens, reverse](const std::vector<Tensor>& in) {
          LstmLayerOutput o = lstm_layer(in[0], in[1], in[2], w[0], w[1], w[2], w[3], lens, reverse);
          return std::vector<Tensor>{o.output, o.h_n, o.c_n};
        };
        const std::vector<Tensor> in{input.narrow(0, begin, end - begin), h, c};
        const bool plain = keep_last && d + 1 == directions && i + 1 == runs;
        std::vector<Tensor> o = plain ? fn(in) : checkpoint(fn, in, /*preserve_rng_state=*/false);
        pieces[static_cast<size_t>(r)] = o[0];
        h = o[1];
        c = o[2];
      }
    }
    outputs.push_back(cat(pieces, 0));
    result[static_cast<size_t>(1 + d)] = h;
    result[static_cast<size_t>(1 + directions + d)] = c;
  }
  result[0] = directions == 1 ? outputs[0] : cat(outputs, 2);
  // Outside the runs, so the mask is the plain module's (one draw over the whole output).
  if (run.dropout > 0) result[0] = dropout(result[0], run.dropout, run.training, run.generator);
  return result;
}

}  // namespace

LSTM::LSTM(int64_t input_size, int64_t hidden_size, const LSTMOptions& options, Generator* generator)
    : input_size_(input_size),
      hidden_size_(hidden_size),
      options_(options),
      generator_(generator),
      inference_layouts_(std::make_shared<backend::WeightLayouts>()) {
  TG_CHECK(input_size > 0 && hidden_size > 0, "LSTM: input_size and hidden_size must be positive, got ", input_size,
           " and ", hidden_size);
  TG_CHECK(options.num_layers_ >= 1, "LSTM: num_layers must be >= 1, got ", options.num_layers_);
  TG_CHECK(options.dropout_ >= 0 && options.dropout_ <= 1, "LSTM: dropout must be in [0, 1], got ", options.dropout_);
  TG_CHECK(options.checkpoint_segments_ >= 1, "LSTM: checkpoint_segments must be at least 1, got ",
           options.checkpoint_segments_);
  TG_CHECK(options.implementation_ != LstmImplementation::CuDNN ||
               (!options.checkpoint_layers_ && options.checkpoint_segments_ == 1),
           "LSTM: checkpoint_layers and checkpoint_segments need the fused implementation, not cuDNN");
  const int64_t directions = options.bidirectional_ ? 2 : 1;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (int64_t layer = 0; layer < options.num_layers_; ++layer) {
    std::vector<Weights> per_direction;
    const int64_t in = layer == 0 ? input_size : hidden_size * directions;
    for (int64_t d = 0; d < directions; ++d) {
      std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      Weights w;
      w.w_ih = register_parameter("weight_ih" + suffix, uniform_parameter({4 * hidden_size, in}, bound, generator));
      w.w_hh =
          register_parameter("weight_hh" + suffix, uniform_parameter({4 * hidden_size, hidden_size}, bound, generator));
      if (options.bias_) {
        w.b_ih = register_parameter("bias_ih" + suffix, uniform_parameter({4 * hidden_size}, bound, generator));
        w.b_hh = register_parameter("bias_hh" + suffix, uniform_parameter({4 * hidden_size}, bound, generator));
      }
      per_direction.push_back(w);
    }
    weights_.push_back(per_direction);
  }
}

std::shared_ptr<LSTM> LSTM::slice_layers(int64_t first, int64_t last) const {
  TG_CHECK(0 <= first && first < last && last <= options_.num_layers_, "LSTM::slice_layers: [", first, ", ", last,
           ") is not a non-empty range of its ", options_.num_layers_, " layers");
  LSTMOptions options = options_;
  options.num_layers_ = last - first;
  const int64_t in = first == 0 ? input_size_ : hidden_size_ * (options_.bidirectional_ ? 2 : 1);
  Generator scratch(0);  // the initial values are overwritten; the default generator stays untouched
  auto slice = std::make_shared<LSTM>(in, hidden_size_, options, &scratch);
  const Tensor& like = weights_[0][0].w_ih;
  slice->to(like.dtype());
  slice->to(like.device());
  autograd::NoGradGuard no_grad;
  for (int64_t layer = 0; layer < options.num_layers_; ++layer) {
    for (size_t d = 0; d < weights_[size_t(layer)].size(); ++d) {
      const Weights& from = weights_[size_t(first + layer)][d];
      Weights& to = slice->weights_[size_t(layer)][d];
      to.w_ih.copy_(from.w_ih);
      to.w_hh.copy_(from.w_hh);
      if (from.b_ih.defined()) to.b_ih.copy_(from.b_ih);
      if (from.b_hh.defined()) to.b_hh.copy_(from.b_hh);
    }
  }
  return slice;
}

LSTMOutput LSTM::operator()(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths) {
  LSTMOutput out = forward(input, h0, c0, lengths);
  if (has_forward_hooks()) run_forward_hooks({input, h0, c0, lengths}, {out.output, out.h_n, out.c_n});
  return out;
}

LSTMOutput LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths) {
  TG_CHECK(input.defined() && input.dim() == 3, "LSTM: input must be 3-D (",
           options_.batch_first_ ? "[B, T, I]" : "[T, B, I]", "), got ",
           input.defined() ? shape_str(input.sizes()) : std::string("undefined"));
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
  // Note [inference layouts]: under InferenceMode nothing is recorded, so no backward can hold a
  // layout, and the weights are read as they are: the module keeps its layers' packed weights
  // (Note [kept weight layouts]) from call to call, which spares a streaming step (batch 1, one
  // timestep) a copy of every weight matrix. A kept layout is dropped as soon as an optimiser,
  // a copy or any in-place op changes its weights; threads share it under the store's lock.
  std::optional<backend::WeightLayoutScope> inference_scope;
  if (autograd::inference_mode_enabled()) inference_scope.emplace(inference_layouts_);
  Tensor zero_state = zeros({batch, hidden_size_}, like);
  // Lengths given on the host go to the device once, not once per layer and direction; each
  // lstm_layer checks them there without waiting (Note [deferred checks]).
  const Tensor lens = lengths.defined() && lengths.device() != x.device() ? lengths.detach().to(x.device()) : lengths;

  // Only worth it when backward will run: with grad mode off the plain forward runs, so that
  // inference gives the same numbers whatever the options.
  const bool checkpointing =
      (options_.checkpoint_layers_ || options_.checkpoint_segments_ > 1) && autograd::grad_enabled();
  // With more runs than steps some would be empty; each run gets at least one step.
  const int64_t runs = std::max<int64_t>(1, std::min(options_.checkpoint_segments_, x.size(0)));
  std::vector<Tensor> h_n, c_n;
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const bool last = layer + 1 == layers;
    LayerRun run;
    for (const Weights& w : weights_[static_cast<size_t>(layer)])
      run.weights.push_back({w.w_ih, w.w_hh, w.b_ih, w.b_hh});
    run.dropout = last ? 0.0 : options_.dropout_;
    run.training = is_training();
    run.generator = generator_;
    std::vector<Tensor> h_init, c_init;
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t k = layer * directions + d;
      h_init.push_back(h0.defined() ? h0.select(0, k) : zero_state);
      c_init.push_back(c0.defined() ? c0.select(0, k) : zero_state);
    }
    std::vector<Tensor> r;
    // The layer computed last is not recomputed: its backward comes first, so no peak would drop.
    if (!checkpointing || (runs == 1 && last))
      r = layer_forward(run, layer_input, h_init, c_init, lens);
    else if (runs == 1)
      r = layer_forward_checkpointed(run, layer_input, h_init, c_init, lens);
    else
      r = layer_forward_segmented(run, layer_input, h_init, c_init, lens, runs, /*keep_last=*/last);
    layer_input = r[0];
    h_n.insert(h_n.end(), r.begin() + 1, r.begin() + 1 + directions);
    c_n.insert(c_n.end(), r.begin() + 1 + directions, r.end());
  }
  LSTMOutput out;
  out.output = options_.batch_first_ ? layer_input.transpose(0, 1) : layer_input;
  // One layer and direction: its states are fresh tensors already, so a view spares two copies.
  out.h_n = h_n.size() == 1 ? h_n[0].unsqueeze(0) : stack(h_n, 0);
  out.c_n = c_n.size() == 1 ? c_n[0].unsqueeze(0) : stack(c_n, 0);
  return out;
}

// The whole stack as one lstm_cudnn op, on the same parameter tensors (packed by the op, and the
// packing kept until a parameter changes).
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
  if (!cudnn_weights_) cudnn_weights_ = make_cudnn_weight_cache();
  cudnn.weight_cache = cudnn_weights_;
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
  if (options_.checkpoint_layers_) s += ", checkpoint_layers=true";
  if (options_.checkpoint_segments_ != 1) s += ", checkpoint_segments=" + std::to_string(options_.checkpoint_segments_);
  return s;
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias, Generator* generator)
    : hidden_size_(hidden_size) {
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
