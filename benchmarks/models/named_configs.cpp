// The named configurations and the training step they share.
#include "named_configs.h"

#include <sstream>

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

std::string ModelShape::describe() const {
  std::ostringstream out;
  if (kind == ModelKind::Mlp) {
    out << "mlp ";
    for (size_t i = 0; i < mlp_sizes.size(); ++i) out << (i ? "-" : "") << mlp_sizes[i];
  } else {
    out << "lstm I=" << input_size << " H=" << hidden_size << " T=" << seq_len;
  }
  return out.str();
}

double ModelShape::gemm_flops_per_example() const {
  // Forward is one multiply-add per weight per example; backward is two (input and weight
  // gradients), except that the first layer's input gradient is not needed.
  double macs = 0;
  if (kind == ModelKind::Mlp) {
    for (size_t i = 0; i + 1 < mlp_sizes.size(); ++i) {
      double weights = static_cast<double>(mlp_sizes[i]) * static_cast<double>(mlp_sizes[i + 1]);
      macs += weights * (i == 0 ? 2 : 3);
    }
  } else {
    double gate_rows = 4.0 * static_cast<double>(hidden_size);
    double per_step =
        gate_rows * static_cast<double>(input_size) * 2 + gate_rows * static_cast<double>(hidden_size) * 3;
    macs = per_step * static_cast<double>(seq_len) + static_cast<double>(hidden_size * num_classes) * 3;
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

}  // namespace

std::shared_ptr<nn::UnaryModule> build_model(const ModelShape& shape, Generator* generator) {
  if (shape.kind == ModelKind::Lstm) return std::make_shared<LstmClassifier>(shape, generator);
  auto model = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < shape.mlp_sizes.size(); ++i) {
    if (i > 0) model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(shape.mlp_sizes[i], shape.mlp_sizes[i + 1], true, generator));
  }
  return model;
}

Shape input_shape(const ModelShape& shape, int64_t batch) {
  if (shape.kind == ModelKind::Lstm) return {shape.seq_len, batch, shape.input_size};
  return {batch, shape.mlp_sizes.front()};
}

std::vector<Batch> make_batches(const ModelShape& shape, int64_t batch, int count, Generator* generator) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    Tensor x = randn(input_shape(shape, batch), {}, generator);
    Tensor y = randint(0, shape.num_classes, {batch}, TensorOptions(kInt64), generator);
    batches.push_back({x, y});
  }
  return batches;
}

TrainingRun::TrainingRun(const ModelShape& shape, int64_t batch, Device device, uint64_t seed, double lr, int pool,
                         const StateDict* weights)
    : device_(device) {
  Generator init(seed), data(seed + 1);
  model_ = build_model(shape, &init);
  if (weights) model_->load_state_dict(*weights);
  model_->to(device);
  optimizer_ = std::make_unique<optim::Adam>(model_->parameters(), optim::AdamOptions(lr));
  for (Batch& b : make_batches(shape, batch, pool, &data)) batches_.push_back({b.x.to(device), b.y.to(device)});
}

TrainingRun::TrainingRun(const ModelShape& shape, const StateDict& weights, const std::vector<Batch>& batches,
                         Device device, double lr)
    : device_(device) {
  TG_CHECK(!batches.empty(), "TrainingRun: no batches");
  model_ = build_model(shape);
  model_->load_state_dict(weights);
  model_->to(device);
  optimizer_ = std::make_unique<optim::Adam>(model_->parameters(), optim::AdamOptions(lr));
  for (const Batch& b : batches) batches_.push_back({b.x.to(device), b.y.to(device)});
}

Tensor TrainingRun::step() {
  static const nn::CrossEntropyLoss loss_fn;
  const Batch& b = batches_[static_cast<size_t>(steps_ % static_cast<int64_t>(batches_.size()))];
  Tensor loss = loss_fn(model_->forward(b.x), b.y);
  optimizer_->zero_grad();
  loss.backward();
  optimizer_->step();
  ++steps_;
  return loss;
}

void TrainingRun::synchronize() const {
  bench::synchronize(device_);
}

void synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index());
}

}  // namespace tapegrad::bench
