// The character-level language model of char_lstm (Embedding -> LSTM -> Linear over the
// vocabulary) and the parts of its loop that tests/examples/test_char_lstm.cpp checks directly: truncated
// BPTT over padded batches with the state carried between chunks, evaluation in bits per
// character, and generation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace examples {

struct CharModelConfig {
  int64_t vocab = 0;  // Vocab::size(), the specials included
  int64_t embedding = 64;
  int64_t hidden = 256;
  int64_t layers = 2;
  double dropout = 0.0;  // between LSTM layers, while training
};

class CharModel : public tapegrad::nn::Module {
 public:
  explicit CharModel(const CharModelConfig& config) : config_(config) {
    using namespace tapegrad;
    // The pad row stays zero and gets no gradient, although padded steps never reach the loss.
    embedding_ =
        register_module("embedding", std::make_shared<nn::Embedding>(config.vocab, config.embedding, Vocab::kPadId));
    lstm_ = register_module(
        "lstm", std::make_shared<nn::LSTM>(config.embedding, config.hidden,
                                           nn::LSTMOptions().num_layers(config.layers).dropout(config.dropout)));
    head_ = register_module("head", std::make_shared<nn::Linear>(config.hidden, config.vocab));
  }

  struct Output {
    tapegrad::Tensor logits;    // [T, B, V]
    tapegrad::Tensor h_n, c_n;  // [layers, B, H]: the state after each row's last real step
  };
  // input int64 [T, B] on the model's device; h0/c0 [layers, B, H] or undefined (zeros); lengths
  // int64 [B] on the CPU or undefined (all T steps real).
  Output forward(const tapegrad::Tensor& input, const tapegrad::Tensor& h0 = {}, const tapegrad::Tensor& c0 = {},
                 const tapegrad::Tensor& lengths = {}) {
    tapegrad::nn::LSTMOutput out = lstm_->forward(embedding_->forward(input), h0, c0, lengths);
    const int64_t steps = out.output.size(0), batch = out.output.size(1);
    tapegrad::Tensor logits = head_->forward(out.output.reshape({steps * batch, config_.hidden}));
    return {logits.view({steps, batch, config_.vocab}), out.h_n, out.c_n};
  }
  const CharModelConfig& config() const { return config_; }
  std::string name() const override { return "CharModel"; }
  const std::shared_ptr<tapegrad::nn::Embedding>& embedding() const { return embedding_; }
  const std::shared_ptr<tapegrad::nn::LSTM>& lstm() const { return lstm_; }
  const std::shared_ptr<tapegrad::nn::Linear>& head() const { return head_; }

 private:
  CharModelConfig config_;
  std::shared_ptr<tapegrad::nn::Embedding> embedding_;
  std::shared_ptr<tapegrad::nn::LSTM> lstm_;
  std::shared_ptr<tapegrad::nn::Linear> head_;
};

// One truncated-BPTT chunk's loss: the mean cross-entropy (nats) over its real targets, with its
// graph, and how many real targets that is.
struct ChunkLoss {
  tapegrad::Tensor loss;
  int64_t targets;
};

// Runs a collated batch (input/target [T, B], lengths [B]) through `model` in chunks of at most
// `bptt` steps, calling on_chunk(ChunkLoss) after each. The state each chunk ends with starts the
// next one, detached so that backward stops at the chunk's start; carry_state = false restarts
// every chunk from zeros (only a test's negative control wants that).
template <class OnChunk>
void for_each_bptt_chunk(CharModel& model, const tapegrad::Example& batch, int64_t bptt, tapegrad::Device device,
                         OnChunk&& on_chunk, bool carry_state = true) {
  using namespace tapegrad;
  Tensor h, c;
  for (const Example& chunk : split_bptt(batch, bptt)) {
    CharModel::Output out = model.forward(chunk.input.to(device), h, c, chunk.lengths);
    const int64_t vocab = model.config().vocab;
    // Padded steps hold target -100 (collate_lm), cross_entropy's ignore_index: no loss, no count.
    Tensor loss = cross_entropy(out.logits.view({-1, vocab}), chunk.target.to(device).view({-1}));
    on_chunk(ChunkLoss{loss, padding_stats(chunk).real});
    if (carry_state) {
      h = out.h_n.detach();
      c = out.c_n.detach();
    }
  }
}

struct TrainTotals {
  double loss_sum = 0;  // nats, summed over real targets
  int64_t targets = 0;  // real characters predicted
  int64_t steps = 0;    // optimiser steps (one per chunk)
  tapegrad::PaddingStats padding;
  double grad_norm_sum = 0;  // total gradient norms before clipping, when clipping
  int64_t grad_norms = 0;
  double mean_loss() const { return targets > 0 ? loss_sum / double(targets) : 0.0; }
  double mean_grad_norm() const { return grad_norms > 0 ? grad_norm_sum / double(grad_norms) : 0.0; }
};

// Backward, clip the gradients' total norm to max_norm (none when max_norm <= 0), step. With a
// GradScaler (--amp f16) the loss is scaled, the gradients unscaled before clipping (so that it
// sees the true norm) and a step with inf or NaN gradients skipped.
inline void backward_clip_step(const tapegrad::Tensor& loss, tapegrad::optim::Optimizer& opt, double max_norm,
                               TrainTotals& totals, tapegrad::amp::GradScaler* scaler) {
  using namespace tapegrad;
  (scaler != nullptr ? scaler->scale(loss) : loss).backward();
  if (scaler != nullptr) scaler->unscale_(opt);
  if (max_norm > 0) {
    // The norm before clipping; reading it costs no extra device sync beside the loss's.
    totals.grad_norm_sum += nn::utils::clip_grad_norm_(opt.params(), max_norm).item();
    ++totals.grad_norms;
  }
  if (scaler == nullptr) {
    opt.step();
    return;
  }
  scaler->step(opt);
  scaler->update();
}

// One optimiser step per chunk (backward_clip_step). Throws tapegrad::Error when the loss stops
// being finite.
inline void train_batch(CharModel& model, tapegrad::optim::Optimizer& opt, const tapegrad::Example& batch, int64_t bptt,
                        double max_norm, tapegrad::Device device, TrainTotals& totals,
                        tapegrad::amp::GradScaler* scaler = nullptr) {
  using namespace tapegrad;
  totals.padding += padding_stats(batch);
  for_each_bptt_chunk(model, batch, bptt, device, [&](const ChunkLoss& chunk) {
    opt.zero_grad();
    backward_clip_step(chunk.loss, opt, max_norm, totals, scaler);
    const double value = chunk.loss.item();
    if (!std::isfinite(value))
      throw Error("the training loss became " + std::to_string(value) + " after " + std::to_string(totals.steps + 1) +
                  " steps; stopping (a lower --lr or --clip may help)");
    totals.loss_sum += value * double(chunk.targets);
    totals.targets += chunk.targets;
    ++totals.steps;
  });
}

// Mean cross-entropy in nats per predicted character over `data` (every record, in length
// order, batches of batch_size, state carried across chunks of bptt steps), in eval mode.
inline double evaluate_nats(CharModel& model, const tapegrad::TextDataset& data, int64_t batch_size, int64_t bptt,
                            tapegrad::Device device) {
  using namespace tapegrad;
  InferenceMode inference;
  const bool was_training = model.is_training();
  model.eval();
  BucketBatchSamplerOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  BucketBatchSampler sampler(data.lengths(), options);
  double loss_sum = 0;
  int64_t targets = 0;
  for (const std::vector<int64_t>& indices : sampler.batches(0))
    for_each_bptt_chunk(model, data.get_batch(indices), bptt, device, [&](const ChunkLoss& chunk) {
      loss_sum += chunk.loss.item() * double(chunk.targets);
      targets += chunk.targets;
    });
  model.train(was_training);
  return targets > 0 ? loss_sum / double(targets) : 0.0;
}

inline double bits(double nats) {
  return nats / std::log(2.0);
}

// Up to `count` characters following bos + prime: the most likely one each step (temperature 0)
// or a draw from softmax(logits / temperature), using `generator`. pad, unk and bos are never
// chosen; choosing eos (the end of a record) ends the text early. The model streams: the prime
// goes in as one chunk, then one character a step with the carried (h, c), under InferenceMode
// (the LSTM keeps its packed weights between the steps: docs/inference.md).
inline std::string generate(CharModel& model, const tapegrad::Vocab& vocab, const std::string& prime, int64_t count,
                            double temperature, tapegrad::Generator& generator, tapegrad::Device device) {
  using namespace tapegrad;
  InferenceMode inference;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> context{Vocab::kBosId};
  for (int64_t id : vocab.encode(prime)) context.push_back(id);
  Tensor input = tensor(context, {int64_t(context.size()), 1});
  Tensor h, c;
  std::vector<int64_t> produced;
  for (int64_t i = 0; i < count; ++i) {
    CharModel::Output out = model.forward(input.to(device), h, c);
    h = out.h_n;
    c = out.c_n;
    Tensor last = out.logits.select(0, out.logits.size(0) - 1).select(0, 0).to(kFloat64).cpu().contiguous();
    const double* logits = last.data<double>();
    const int64_t size = last.numel();
    int64_t next = Vocab::kEosId;
    double best = -INFINITY;
    for (int64_t id = Vocab::kEosId; id < size; ++id)
      if (logits[id] > best) best = logits[id], next = id;
    if (temperature > 0) {
      std::vector<double> weights(size_t(size), 0.0);
      double total = 0;
      for (int64_t id = Vocab::kEosId; id < size; ++id)
        total += weights[size_t(id)] = std::exp((logits[id] - best) / temperature);
      double u = rand({1}, kFloat64, &generator).item() * total;
      for (next = Vocab::kEosId; next + 1 < size && u >= weights[size_t(next)]; ++next) u -= weights[size_t(next)];
    }
    if (next == Vocab::kEosId) break;
    produced.push_back(next);
    input = full({1, 1}, double(next), kInt64);
  }
  model.train(was_training);
  return vocab.decode(produced);
}

}  // namespace examples
