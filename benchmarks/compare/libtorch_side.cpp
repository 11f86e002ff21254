// LibTorch versions of the named configurations (the only file that includes torch headers).
#include "libtorch_side.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <sstream>

namespace tapegrad::bench {

namespace {

// LSTM over a time-major sequence, then a linear head on the last hidden state; children "lstm"
// and "fc" like the tapegrad model.
struct LstmClassifierImpl : torch::nn::Module {
  LstmClassifierImpl(const ModelShape& shape)
      : lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(shape.input_size, shape.hidden_size)))),
        fc(register_module("fc", torch::nn::Linear(shape.hidden_size, shape.num_classes))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto out = lstm->forward(x);
    return fc->forward(std::get<0>(std::get<1>(out))[0]);
  }
  torch::nn::LSTM lstm;
  torch::nn::Linear fc;
};
TORCH_MODULE(LstmClassifier);

// examples/char_lstm's model as a LibTorch user writes it: the padded batch packed with
// pack_padded_sequence (unsorted lengths, as bucketed batches come), the LSTM over the packed
// sequence, unpacked to [T, B, H] for the head. Children "embedding", "lstm", "head".
struct CharLanguageModelImpl : torch::nn::Module {
  CharLanguageModelImpl(const ModelShape& shape)
      : embedding(register_module(
            "embedding",
            torch::nn::Embedding(torch::nn::EmbeddingOptions(shape.num_classes, shape.input_size).padding_idx(0)))),
        lstm(register_module(
            "lstm",
            torch::nn::LSTM(torch::nn::LSTMOptions(shape.input_size, shape.hidden_size).num_layers(shape.num_layers)))),
        head(register_module("head", torch::nn::Linear(shape.hidden_size, shape.num_classes))),
        hidden(shape.hidden_size) {}
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& lengths) {
    namespace rnn = torch::nn::utils::rnn;
    rnn::PackedSequence packed =
        rnn::pack_padded_sequence(embedding->forward(x), lengths, /*batch_first=*/false, /*enforce_sorted=*/false);
    torch::Tensor out = std::get<0>(rnn::pad_packed_sequence(std::get<0>(lstm->forward_with_packed_input(packed)),
                                                             /*batch_first=*/false, 0.0, x.size(0)));
    return head->forward(out.reshape({-1, hidden}));
  }
  torch::nn::Embedding embedding;
  torch::nn::LSTM lstm;
  torch::nn::Linear head;
  int64_t hidden;
};
TORCH_MODULE(CharLanguageModel);

// Copies a tapegrad CPU tensor into a new LibTorch tensor of the same shape and dtype.
torch::Tensor to_torch(const Tensor& t) {
  Tensor src = t.cpu().contiguous();
  std::vector<int64_t> sizes(src.sizes().begin(), src.sizes().end());
  TG_CHECK(src.dtype() == kFloat32 || src.dtype() == kInt64, "compare: unexpected dtype ", src.dtype());
  auto dtype = src.dtype() == kFloat32 ? torch::kFloat32 : torch::kInt64;
  return torch::from_blob(src.data_ptr(), sizes, dtype).clone();
}

// The lines of at::get_parallel_info() that say how LibTorch runs its threads, joined into one.
std::string parallel_summary(const std::string& info) {
  std::istringstream lines(info);
  std::string line, out;
  while (std::getline(lines, line)) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    line = line.substr(start);
    if (line.find("get_num") != std::string::npos || line.find("backend") != std::string::npos ||
        line.rfind("OpenMP", 0) == 0 || line.find("MKL-DNN") != std::string::npos)
      out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

}  // namespace

LibTorchInfo libtorch_info() {
  LibTorchInfo info;
  info.version = TORCH_VERSION;
  info.parallel_info = parallel_summary(at::get_parallel_info());
  std::istringstream config(at::show_config());
  std::string line;
  while (std::getline(config, line)) {
    size_t at = line.find("BLAS_INFO=");
    if (at != std::string::npos) info.blas = line.substr(at, line.find(',', at) - at);
  }
  return info;
}

void libtorch_set_threads(int threads) {
  at::set_num_interop_threads(threads);
  at::set_num_threads(threads);
}

struct LibTorchRun::Impl {
  // Logits of batch i, and the targets cross-entropy compares them with.
  std::function<torch::Tensor(size_t)> forward;
  std::function<torch::Tensor(size_t)> targets;
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<torch::optim::Adam> optimizer;
  std::vector<torch::Tensor> xs, ys, lengths;
  torch::Tensor loss;
  torch::Tensor output;  // of the latest infer(), kept so that the forward is not freed inside the timing
  size_t steps = 0;
  bool autocast = false;
};

LibTorchRun::LibTorchRun(const ModelShape& shape, const StateDict& weights, const std::vector<Batch>& batches,
                         double lr, bool autocast_bf16)
    : impl_(std::make_unique<Impl>()) {
  Impl* s = impl_.get();
  s->autocast = autocast_bf16;
  s->targets = [s](size_t i) { return s->ys[i]; };
  if (shape.kind == ModelKind::CharLm) {
    CharLanguageModel model(shape);
    s->module = model.ptr();
    s->forward = [s, model](size_t i) mutable { return model->forward(s->xs[i], s->lengths[i]); };
    s->targets = [s](size_t i) { return s->ys[i].reshape({-1}); };
  } else if (shape.kind == ModelKind::Lstm) {
    LstmClassifier model(shape);
    s->module = model.ptr();
    s->forward = [s, model](size_t i) mutable { return model->forward(s->xs[i]); };
  } else {
    torch::nn::Sequential model;
    for (size_t i = 0; i + 1 < shape.mlp_sizes.size(); ++i) {
      if (i > 0) model->push_back(torch::nn::ReLU());
      model->push_back(torch::nn::Linear(shape.mlp_sizes[i], shape.mlp_sizes[i + 1]));
    }
    s->module = model.ptr();
    s->forward = [s, model](size_t i) mutable { return model->forward(s->xs[i]); };
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& item : impl_->module->named_parameters()) {
      const Tensor* source = nullptr;
      for (const auto& [name, tensor] : weights)
        if (name == item.key()) source = &tensor;
      TG_CHECK(source, "compare: the weights have no '", item.key(), "' for the LibTorch model");
      torch::Tensor value = to_torch(*source);
      TG_CHECK(value.sizes() == item.value().sizes(), "compare: '", item.key(), "' has the wrong shape");
      item.value().copy_(value);
    }
  }
  for (const Batch& b : batches) {
    impl_->xs.push_back(to_torch(b.x));
    impl_->ys.push_back(to_torch(b.y));
    impl_->lengths.push_back(b.lengths.defined() ? to_torch(b.lengths) : torch::Tensor());
  }
  impl_->optimizer = std::make_unique<torch::optim::Adam>(impl_->module->parameters(), torch::optim::AdamOptions(lr));
}

LibTorchRun::~LibTorchRun() = default;

// A training step with `mark(phase)` called after each of its three phases (0: forward and loss,
// 1: gradients to none and backward, 2: Adam), as TrainingRun's eager_step does; step() passes a
// mark that does nothing, so the phased step cannot drift apart from it in what it runs.
template <typename Mark>
void LibTorchRun::run_step(Mark&& mark) {
  Impl& s = *impl_;
  size_t i = s.steps % s.xs.size();
  // ignore_index -100 is the default, so the char model's padded steps add nothing, as in tapegrad.
  if (s.autocast) {
    // What `with torch.autocast("cpu", dtype=torch.bfloat16):` does on entry and exit.
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
    s.loss = torch::nn::functional::cross_entropy(s.forward(i), s.targets(i));
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
  } else {
    s.loss = torch::nn::functional::cross_entropy(s.forward(i), s.targets(i));
  }
  mark(0);
  // Gradients to none, as tapegrad's zero_grad does (LibTorch 1.13's zero_grad() zeroes them).
  for (auto& p : s.module->parameters()) p.mutable_grad() = torch::Tensor();
  s.loss.backward();
  mark(1);
  s.optimizer->step();
  mark(2);
  ++s.steps;
}

void LibTorchRun::step() {
  run_step([](int) {});
}

StepPhases LibTorchRun::phased_step() {
  using Clock = std::chrono::steady_clock;
  StepPhases phases;
  double* slots[3] = {&phases.forward_ms, &phases.backward_ms, &phases.optimizer_ms};
  Clock::time_point last = Clock::now();
  run_step([&](int phase) {
    const Clock::time_point now = Clock::now();
    *slots[phase] = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  });
  return phases;
}

void LibTorchRun::infer() {
  Impl& s = *impl_;
  if (s.module->is_training()) s.module->eval();
  torch::InferenceMode inference;
  s.output = s.forward(s.steps % s.xs.size());
  ++s.steps;
}

Tensor LibTorchRun::output_of(size_t batch) {
  Impl& s = *impl_;
  TG_CHECK(batch < s.xs.size(), "compare: batch ", batch, " of a pool of ", s.xs.size());
  if (s.module->is_training()) s.module->eval();
  torch::InferenceMode inference;
  torch::Tensor out = s.forward(batch).contiguous();
  TG_CHECK(out.scalar_type() == torch::kFloat32, "compare: LibTorch logits are ", out.scalar_type(), ", not float");
  std::vector<float> values(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  return tapegrad::tensor(values, Shape(out.sizes().begin(), out.sizes().end()));
}

double LibTorchRun::last_loss() const {
  return impl_->loss.defined() ? impl_->loss.item<double>() : 0.0;
}

}  // namespace tapegrad::bench
