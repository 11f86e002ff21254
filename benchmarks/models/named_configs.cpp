// The named configurations and the training step they share.
#include "named_configs.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <sstream>

#include "common/step_timer.h"

namespace tapegrad::bench {

ModelShape ModelShape::mlp(std::vector<int64_t> sizes) {
  TG_CHECK(sizes.size() >= 2, "ModelShape::mlp: need at least input and output sizes");
  ModelShape s;
  s.kind = ModelKind::Mlp;
  s.mlp_sizes = std::move(sizes);
  s.num_classes = s.mlp_sizes.back();
  return s;
}

ModelShape ModelShape::lstm(int64_t input_size, int64_t hidden_size, int64_t seq_len, int64_t num_classes) {
  ModelShape s;
  s.kind = ModelKind::Lstm;
  s.input_size = input_size;
  s.hidden_size = hidden_size;
  s.seq_len = seq_len;
  s.num_classes = num_classes;
  return s;
}

ModelShape ModelShape::char_lm(int64_t vocab, int64_t embedding, int64_t hidden, int64_t layers, int64_t bptt) {
  TG_CHECK(vocab >= 2 && embedding > 0 && hidden > 0 && layers > 0 && bptt > 0,
           "ModelShape::char_lm: sizes must be positive (and the vocabulary at least 2), got V=", vocab,
           " E=", embedding, " H=", hidden, " layers=", layers, " bptt=", bptt);
  ModelShape s;
  s.kind = ModelKind::CharLm;
  s.input_size = embedding;
  s.hidden_size = hidden;
  s.num_layers = layers;
  s.seq_len = bptt;
  s.num_classes = vocab;
  return s;
}

std::string ModelShape::describe() const {
  std::ostringstream out;
  if (kind == ModelKind::Mlp) {
    out << "mlp ";
    for (size_t i = 0; i < mlp_sizes.size(); ++i) out << (i ? "-" : "") << mlp_sizes[i];
  } else if (kind == ModelKind::CharLm) {
    out << "char lm V=" << num_classes << " E=" << input_size << " H=" << hidden_size << "x" << num_layers
        << " T<=" << seq_len;
  } else {
    out << "lstm I=" << input_size << " H=" << hidden_size << " T=" << seq_len;
  }
  return out.str();
}

double ModelShape::gemm_flops_per_example() const {
  return gemm_flops_per_example_of_length(kind == ModelKind::CharLm ? mean_char_chunk_length(seq_len) : 0);
}

double ModelShape::gemm_forward_flops_per_example() const {
  return gemm_forward_flops_per_example_of_length(kind == ModelKind::CharLm ? mean_char_chunk_length(seq_len) : 0);
}

namespace {

// The mean of a CharLm batch's lengths (its real steps per example); 0 for the other kinds.
double mean_real_steps(const ModelShape& shape, const Batch& batch) {
  if (shape.kind != ModelKind::CharLm) return 0;
  TG_CHECK(batch.lengths.defined() && batch.lengths.numel() > 0, "gemm_flops_per_example: a ", shape.describe(),
           " batch needs its lengths");
  return batch.lengths.to(kFloat64).mean().item<double>();
}

}  // namespace

double ModelShape::gemm_flops_per_example(const Batch& batch) const {
  return gemm_flops_per_example_of_length(mean_real_steps(*this, batch));
}

double ModelShape::gemm_forward_flops_per_example(const Batch& batch) const {
  return gemm_forward_flops_per_example_of_length(mean_real_steps(*this, batch));
}

double median_batch_gemm_flops_per_example(const ModelShape& shape, const std::vector<Batch>& pool, bool forward_only) {
  if (pool.empty()) return forward_only ? shape.gemm_forward_flops_per_example() : shape.gemm_flops_per_example();
  std::vector<double> work;
  for (const Batch& b : pool)
    work.push_back(forward_only ? shape.gemm_forward_flops_per_example(b) : shape.gemm_flops_per_example(b));
  return median(work);
}

double mean_batch_gemm_flops_per_example(const ModelShape& shape, const std::vector<Batch>& pool) {
  if (pool.empty()) return shape.gemm_flops_per_example();
  double total = 0;
  for (const Batch& b : pool) total += shape.gemm_flops_per_example(b);
  return total / static_cast<double>(pool.size());
}

double ModelShape::gemm_flops_per_example_of_length(double char_steps) const {
  // Forward is one multiply-add per weight per example; backward is two (input and weight
  // gradients), except that the first layer's input gradient is not needed.
  double macs = 0;
  if (kind == ModelKind::Mlp) {
    for (size_t i = 0; i + 1 < mlp_sizes.size(); ++i) {
      double weights = static_cast<double>(mlp_sizes[i]) * static_cast<double>(mlp_sizes[i + 1]);
      macs += weights * (i == 0 ? 2 : 3);
    }
  } else if (kind == ModelKind::CharLm) {
    // Per real step: each layer's forward GEMM and its two backward ones, and the head's three.
    const double gate_rows = 4.0 * static_cast<double>(hidden_size);
    double per_step = 0;
    for (int64_t layer = 0; layer < num_layers; ++layer)
      per_step += 3 * gate_rows * static_cast<double>((layer == 0 ? input_size : hidden_size) + hidden_size);
    per_step += 3.0 * static_cast<double>(hidden_size * num_classes);
    macs = per_step * char_steps;
  } else {
    double gate_rows = 4.0 * static_cast<double>(hidden_size);
    double per_step =
        gate_rows * static_cast<double>(input_size) * 2 + gate_rows * static_cast<double>(hidden_size) * 3;
    macs = per_step * static_cast<double>(seq_len) + static_cast<double>(hidden_size * num_classes) * 3;
  }
  return 2 * macs;
}

double ModelShape::gemm_forward_flops_per_example_of_length(double char_steps) const {
  double macs = 0;
  if (kind == ModelKind::Mlp) {
    for (size_t i = 0; i + 1 < mlp_sizes.size(); ++i)
      macs += static_cast<double>(mlp_sizes[i]) * static_cast<double>(mlp_sizes[i + 1]);
  } else {
    const double gate_rows = 4.0 * static_cast<double>(hidden_size);
    double per_step = 0;
    for (int64_t layer = 0; layer < num_layers; ++layer)
      per_step += gate_rows * static_cast<double>((layer == 0 ? input_size : hidden_size) + hidden_size);
    if (kind == ModelKind::CharLm) {
      // The head runs at every step; padded steps are not work (as in gemm_flops_per_example()).
      per_step += static_cast<double>(hidden_size * num_classes);
      macs = per_step * char_steps;
    } else {
      macs = per_step * static_cast<double>(seq_len) + static_cast<double>(hidden_size * num_classes);
    }
  }
  return 2 * macs;
}

const std::vector<NamedConfig>& named_configs() {
  static const std::vector<NamedConfig> configs = {
      {"mlp_seed", "Linear(1000,512)-ReLU-Linear(512,10)", ModelShape::mlp({1000, 512, 10}), {64, 256, 1024}},
      {"mlp_fashion", "784-512-256-10 MLP", ModelShape::mlp({784, 512, 256, 10}), {64, 256}},
      {"lstm_row", "LSTM(28,128)+Linear(128,10), 28 steps", ModelShape::lstm(28, 128, 28), {64}},
      {"lstm_small", "LSTM(32,128)+Linear(128,10), 50 steps", ModelShape::lstm(32, 128, 50), {1, 16, 64, 256}},
      {"lstm_large", "LSTM(256,512)+Linear(512,10), 100 steps", ModelShape::lstm(256, 512, 100), {64}},
      // examples/char_lstm's model and batch (fortunes: 112 characters + 4 specials), Adam 2e-3.
      {"char_lstm",
       "Embedding(116,64)+LSTM(64,256,2 layers)+Linear(256,116), chunks <= 128 steps",
       ModelShape::char_lm(116, 64, 256, 2, 128),
       {32},
       2e-3},
  };
  return configs;
}

const NamedConfig& named_config(const std::string& name) {
  std::string known;
  for (const NamedConfig& c : named_configs()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  TG_CHECK(false, "unknown named configuration '", name, "' (known: ", known, ")");
  return named_configs().front();  // not reached
}

namespace {

// The lengths (characters to predict, a record's end included) of the chunks examples/char_lstm
// cuts Debian's fortunes into at BPTT 128: 27,328 chunks, mean 93.2, as 32 quantiles (the value at
// the middle of each 1/32 of the sorted chunks). Computed from /usr/share/games/fortunes (fortunes
// 1:1.99.1) by splitting each file at lines holding only "%" and cutting each record's length + 1
// into pieces of at most 128.
constexpr std::array<int64_t, 32> kFortuneChunkQuantiles = {6,   17,  26,  34,  41,  47,  53,  58,  63,  68,  74,
                                                            79,  85,  92,  99,  107, 115, 125, 128, 128, 128, 128,
                                                            128, 128, 128, 128, 128, 128, 128, 128, 128, 128};

int64_t chunk_length(int64_t quantile, int64_t bptt) {
  return std::clamp<int64_t>(kFortuneChunkQuantiles[static_cast<size_t>(quantile)], 1, bptt);
}

// LSTM over a time-major sequence, then a linear head on the last hidden state.
class LstmClassifier : public nn::UnaryModule {
 public:
  LstmClassifier(const ModelShape& shape, Generator* generator) {
    lstm_ = register_module(
        "lstm", std::make_shared<nn::LSTM>(shape.input_size, shape.hidden_size, nn::LSTMOptions(), generator));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(shape.hidden_size, shape.num_classes, true, generator));
  }
  Tensor forward(const Tensor& x) override {  // x [T, B, I] -> logits [B, classes]
    return fc_->forward(lstm_->forward(x).h_n.select(0, 0));
  }
  std::string name() const override { return "LstmClassifier"; }

 private:
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> fc_;
};

// examples/char_lstm's model: ids [T, B] -> logits [T * B, V]. forward(x) treats every step as
// real; forward(x, lengths) stops each row at its length.
class CharLanguageModel : public nn::UnaryModule {
 public:
  CharLanguageModel(const ModelShape& shape, Generator* generator) : shape_(shape) {
    embedding_ =
        register_module("embedding", std::make_shared<nn::Embedding>(shape.num_classes, shape.input_size,
                                                                     /*padding_idx=*/0, std::nullopt, 2.0, generator));
    lstm_ =
        register_module("lstm", std::make_shared<nn::LSTM>(shape.input_size, shape.hidden_size,
                                                           nn::LSTMOptions().num_layers(shape.num_layers), generator));
    head_ =
        register_module("head", std::make_shared<nn::Linear>(shape.hidden_size, shape.num_classes, true, generator));
  }
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& lengths) {
    Tensor out = lstm_->forward(embedding_->forward(x), Tensor(), Tensor(), lengths).output;
    return head_->forward(out.reshape({-1, shape_.hidden_size}));
  }
  std::string name() const override { return "CharLanguageModel"; }

 private:
  ModelShape shape_;
  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};

// One batch of `batch` chunks: a bucket quantile q, each row's length from quantiles q-1..q+1.
Batch make_char_batch(const ModelShape& shape, int64_t batch, Generator* generator) {
  const int64_t quantiles = static_cast<int64_t>(kFortuneChunkQuantiles.size());
  const int64_t bucket = randint(0, quantiles, {1}, TensorOptions(kInt64), generator).item<int64_t>();
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  Tensor offsets = randint(-1, 2, {batch}, TensorOptions(kInt64), generator);
  for (int64_t b = 0; b < batch; ++b)
    lengths[static_cast<size_t>(b)] =
        chunk_length(std::clamp<int64_t>(bucket + offsets[b].item<int64_t>(), 0, quantiles - 1), shape.seq_len);
  const int64_t steps = *std::max_element(lengths.begin(), lengths.end());
  // Ids 1..V-1 (0 is padding); the target of step t is the input of step t + 1, as in a record.
  Tensor ids = randint(1, shape.num_classes, {steps + 1, batch}, TensorOptions(kInt64), generator);
  Tensor x = zeros({steps, batch}, TensorOptions(kInt64)), y = full({steps, batch}, -100.0, TensorOptions(kInt64));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = lengths[static_cast<size_t>(b)];
    x.narrow(0, 0, n).select(1, b).copy_(ids.narrow(0, 0, n).select(1, b));
    y.narrow(0, 0, n).select(1, b).copy_(ids.narrow(0, 1, n).select(1, b));
  }
  return {x, y, tensor(lengths, {batch})};
}

}  // namespace

double mean_char_chunk_length(int64_t bptt) {
  double total = 0;
  for (int64_t q = 0; q < static_cast<int64_t>(kFortuneChunkQuantiles.size()); ++q) total += chunk_length(q, bptt);
  return total / static_cast<double>(kFortuneChunkQuantiles.size());
}

Tensor model_output(const ModelShape& shape, nn::UnaryModule& model, const Batch& batch) {
  if (shape.kind == ModelKind::CharLm) return dynamic_cast<CharLanguageModel&>(model).forward(batch.x, batch.lengths);
  return model.forward(batch.x);
}

Tensor training_loss(const ModelShape& shape, nn::UnaryModule& model, const Batch& batch) {
  const Tensor targets = shape.kind == ModelKind::CharLm ? batch.y.reshape({-1}) : batch.y;
  return cross_entropy(model_output(shape, model, batch), targets);
}

std::shared_ptr<nn::UnaryModule> build_model(const ModelShape& shape, Generator* generator) {
  if (shape.kind == ModelKind::Lstm) return std::make_shared<LstmClassifier>(shape, generator);
  if (shape.kind == ModelKind::CharLm) return std::make_shared<CharLanguageModel>(shape, generator);
  auto model = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < shape.mlp_sizes.size(); ++i) {
    if (i > 0) model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(shape.mlp_sizes[i], shape.mlp_sizes[i + 1], true, generator));
  }
  return model;
}

Shape input_shape(const ModelShape& shape, int64_t batch) {
  if (shape.kind == ModelKind::Lstm) return {shape.seq_len, batch, shape.input_size};
  if (shape.kind == ModelKind::CharLm) return {shape.seq_len, batch};
  return {batch, shape.mlp_sizes.front()};
}

std::vector<Batch> make_batches(const ModelShape& shape, int64_t batch, int count, Generator* generator) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    if (shape.kind == ModelKind::CharLm) {
      batches.push_back(make_char_batch(shape, batch, generator));
      continue;
    }
    Tensor x = randn(input_shape(shape, batch), {}, generator);
    Tensor y = randint(0, shape.num_classes, {batch}, TensorOptions(kInt64), generator);
    batches.push_back({x, y, Tensor()});
  }
  return batches;
}

TrainingRun::TrainingRun(const ModelShape& shape, int64_t batch, Device device, uint64_t seed, double lr, int pool,
                         const StateDict* weights)
    : shape_(shape), device_(device) {
  Generator init(seed), data(seed + 1);
  model_ = build_model(shape, &init);
  if (weights) model_->load_state_dict(*weights);
  model_->to(device);
  optimizer_ = std::make_unique<optim::Adam>(model_->parameters(), optim::AdamOptions(lr));
  for (Batch& b : make_batches(shape, batch, pool, &data))
    batches_.push_back({b.x.to(device), b.y.to(device), b.lengths});
}

TrainingRun::TrainingRun(const ModelShape& shape, const StateDict& weights, const std::vector<Batch>& batches,
                         Device device, double lr)
    : shape_(shape), device_(device) {
  TG_CHECK(!batches.empty(), "TrainingRun: no batches");
  model_ = build_model(shape);
  model_->load_state_dict(weights);
  model_->to(device);
  optimizer_ = std::make_unique<optim::Adam>(model_->parameters(), optim::AdamOptions(lr));
  for (const Batch& b : batches) batches_.push_back({b.x.to(device), b.y.to(device), b.lengths});
}

namespace {

// One eager training step, with `mark(phase)` called after each of its three phases (0: forward and
// loss, 1: zero_grad and backward, 2: Adam). step() passes a mark that does nothing and
// phased_step() one that reads a clock, so the two cannot drift apart in what they run.
template <typename Mark>
Tensor eager_step(const ModelShape& shape, nn::UnaryModule& model, optim::Adam& optimizer, const Batch& b,
                  Mark&& mark) {
  Tensor loss = training_loss(shape, model, b);
  mark(0);
  optimizer.zero_grad();
  loss.backward();
  mark(1);
  optimizer.step();
  mark(2);
  return loss;
}

}  // namespace

Tensor TrainingRun::step() {
  const Batch& b = batches_[static_cast<size_t>(steps_ % static_cast<int64_t>(batches_.size()))];
  ++steps_;
  if (graph_) {
    graph_batch_.x.copy_(b.x);
    graph_batch_.y.copy_(b.y);
    graph_->replay();
    return graph_loss_;
  }
  return eager_step(shape_, *model_, *optimizer_, b, [](int) {});
}

Tensor TrainingRun::phased_step(StepPhases* phases) {
  TG_CHECK(!graph_, "TrainingRun::phased_step: the step replays a CUDA graph, which has no phases to time");
  const Batch& b = batches_[static_cast<size_t>(steps_ % static_cast<int64_t>(batches_.size()))];
  ++steps_;
  using Clock = std::chrono::steady_clock;
  // On a GPU the calls only queue kernels: without a synchronise the clock would time the queueing.
  synchronize();
  Clock::time_point last = Clock::now();
  double* slots[3] = {&phases->forward_ms, &phases->backward_ms, &phases->optimizer_ms};
  return eager_step(shape_, *model_, *optimizer_, b, [&](int phase) {
    synchronize();
    const Clock::time_point now = Clock::now();
    *slots[phase] = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  });
}

void TrainingRun::capture_graph() {
  TG_CHECK(device_.is_cuda(), "TrainingRun::capture_graph: needs a CUDA device, the run is on ", device_);
  TG_CHECK(shape_.kind != ModelKind::CharLm, "TrainingRun::capture_graph: ", shape_.describe(),
           " has batches of different lengths, and a graph replays fixed shapes");
  TG_CHECK(!graph_, "TrainingRun::capture_graph: already captured");
  const double lr = optimizer_->param_groups()[0].lr();
  auto capturable = std::make_unique<optim::Adam>(model_->parameters(), optim::AdamOptions(lr).capturable(true));
  capturable->load_state_dict(optimizer_->state_dict());
  optimizer_ = std::move(capturable);
  const Batch& b = batches_[static_cast<size_t>(steps_ % static_cast<int64_t>(batches_.size()))];
  graph_batch_ = {b.x.clone(), b.y.clone(), Tensor()};
  auto whole_step = [&] {
    graph_loss_ = training_loss(shape_, *model_, graph_batch_);
    optimizer_->zero_grad();
    graph_loss_.backward();
    optimizer_->step();
  };
  whole_step();  // the warm-up: the capturable optimiser's state exists before capture
  ++steps_;
  auto graph = std::make_unique<cuda::Graph>();
  {
    cuda::GraphCapture capture(*graph);
    whole_step();  // recorded, not run
  }
  graph_ = std::move(graph);
}

void TrainingRun::synchronize() const {
  bench::synchronize(device_);
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index());
}

cuda::Counters step_counts(TrainingRun& run) {
  const cuda::Counters before = cuda::counters();
  (void)run.step();
  return cuda::counters() - before;
}

}  // namespace tapegrad::bench
