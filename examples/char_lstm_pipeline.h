// char_lstm --pipeline-stages N: the character model cut by LSTM layers across the N processes of
// an MPI job (mpirun -np N), trained with distributed::Pipeline. Stage 0 holds the embedding, the
// last stage the head and the loss, stage s the layers [s L / N, (s + 1) L / N). Every rank reads
// the same batches; each BPTT chunk is split into micro-batches by records, and each stage carries
// its layers' (h, c) per micro-batch from one chunk to the next, as the whole model carries them
// per record. Each micro-batch's loss is its summed cross-entropy over the chunk's real targets,
// so a chunk's gradient is the one process's, and clipping uses the norm over every stage.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "char_lstm_model.h"
#include "tapegrad/tapegrad.h"

namespace examples {

class CharStage {
 public:
  // Stage `stage` of `stages` of `whole` (which it shares the embedding and head with, and copies
  // its layers of the LSTM from).
  CharStage(const CharModel& whole, int stage, int stages)
      : stage_(stage), stages_(stages), dropout_(whole.config().dropout) {
    const int64_t layers = whole.config().layers;
    if (stage == 0) embedding_ = whole.embedding();
    lstm_ = whole.lstm()->slice_layers(layers * stage / stages, layers * (stage + 1) / stages);
    if (stage == stages - 1) head_ = whole.head();
  }

  // inputs {ids [T, b] (stage 0) or the previous layer's output [T, b, H], lengths [b] on the CPU}
  // -> {this stage's last layer's output (the logits [T * b, V] on the last stage), lengths}.
  std::vector<tapegrad::Tensor> forward(const std::vector<tapegrad::Tensor>& in, int64_t micro_batch) {
    using namespace tapegrad;
    Tensor x = embedding_ ? embedding_->forward(in[0]) : in[0];
    auto& [h, c] = state_.at(size_t(micro_batch));
    nn::LSTMOutput out = lstm_->forward(x, h, c, in[1]);
    h = out.h_n.detach();
    c = out.c_n.detach();
    Tensor y = out.output;
    // The whole LSTM drops out between its layers; the dropout between this stage and the next is ours.
    if (!head_ && dropout_ > 0) y = dropout(y, dropout_, lstm_->is_training());
    if (head_) y = head_->forward(y.reshape({-1, y.size(2)}));
    return {y, in[1]};
  }

  // A new batch: every micro-batch starts from zero state.
  void reset_state(int64_t micro_batches) { state_.assign(size_t(micro_batches), {}); }
  void train(bool on) {
    for (tapegrad::nn::Module* m : modules()) m->train(on);
  }
  // char_lstm's groups: weight decay on the weight matrices, not on biases or the embedding.
  std::vector<tapegrad::optim::ParamGroup> param_groups(double weight_decay) const {
    std::vector<tapegrad::Tensor> decayed, plain;
    for (tapegrad::nn::Module* m : modules())
      for (const tapegrad::Tensor& t : m->parameters())
        (t.dim() >= 2 && m != embedding_.get() ? decayed : plain).push_back(t);
    return {tapegrad::optim::ParamGroup(decayed).weight_decay(weight_decay),
            tapegrad::optim::ParamGroup(plain).weight_decay(0)};
  }
  std::vector<tapegrad::Tensor> parameters() const {
    std::vector<tapegrad::Tensor> all;
    for (tapegrad::nn::Module* m : modules())
      for (const tapegrad::Tensor& t : m->parameters()) all.push_back(t);
    return all;
  }
  int64_t parameter_bytes() const {
    int64_t bytes = 0;
    for (const tapegrad::Tensor& t : parameters()) bytes += t.numel() * int64_t(tapegrad::dtype_size(t.dtype()));
    return bytes;
  }
  int stage() const { return stage_; }
  int stages() const { return stages_; }

 private:
  std::vector<tapegrad::nn::Module*> modules() const {
    std::vector<tapegrad::nn::Module*> all;
    if (embedding_) all.push_back(embedding_.get());
    all.push_back(lstm_.get());
    if (head_) all.push_back(head_.get());
    return all;
  }
  int stage_, stages_;
  double dropout_;
  std::shared_ptr<tapegrad::nn::Embedding> embedding_;
  std::shared_ptr<tapegrad::nn::LSTM> lstm_;
  std::shared_ptr<tapegrad::nn::Linear> head_;
  std::vector<std::pair<tapegrad::Tensor, tapegrad::Tensor>> state_;
};

// One Pipeline per micro-batch count (a batch of fewer records than --micro-batches uses one per
// record), the same on every rank since every rank sees the same batches.
class CharPipeline {
 public:
  CharPipeline(CharStage& stage, std::shared_ptr<tapegrad::distributed::ProcessGroup> group, int64_t micro_batches)
      : stage_(stage), group_(std::move(group)), micro_batches_(micro_batches) {}

  // Micro-batches for a batch of `records`.
  int64_t micro_batches_for(int64_t records) const { return std::min(micro_batches_, records); }

  // One chunk's step (train) or forward (eval): the chunk's mean loss over its real targets.
  double run(const tapegrad::Example& chunk, int64_t micro_batches, bool train) {
    using namespace tapegrad;
    distributed::Pipeline& pipe = pipeline(micro_batches);
    const double real = double(padding_stats(chunk).real);
    const int64_t records = chunk.input.size(1);
    std::vector<distributed::MicroBatch> inputs, targets;
    for (int64_t m = 0, start = 0; m < micro_batches; ++m) {
      const int64_t rows = records / micro_batches + (m < records % micro_batches ? 1 : 0);
      if (pipe.is_first()) inputs.push_back({chunk.input.narrow(1, start, rows), chunk.lengths.narrow(0, start, rows)});
      if (pipe.is_last()) targets.push_back({chunk.target.narrow(1, start, rows)});
      start += rows;
    }
    pipe.set_loss([real](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
      CrossEntropyOptions summed;
      summed.reduction = Reduction::Sum;  // padded steps hold -100, the ignored index
      return cross_entropy(out[0], target[0].reshape({-1}), summed) / real;
    });
    const std::vector<double> ones(size_t(micro_batches), 1.0);
    return train ? pipe.step(inputs, targets, ones) : pipe.eval_step(inputs, targets, ones);
  }

  // The gradients' total norm over every stage, then each scaled by min(1, max_norm / (norm + 1e-6))
  // as clip_grad_norm_ does on one process. Returns the norm.
  double clip_grad_norm(double max_norm) {
    using namespace tapegrad;
    double sum_sq = 0;
    for (const Tensor& p : stage_.parameters())
      if (p.grad().defined()) sum_sq += (p.grad().to(kFloat64) * p.grad().to(kFloat64)).sum().item();
    Tensor total = tensor<double>({sum_sq}, {1});
    group_->all_reduce(total);
    const double norm = std::sqrt(total.item());
    const double scale = max_norm / (norm + 1e-6);
    if (scale < 1) {
      autograd::NoGradGuard no_grad;
      for (const Tensor& p : stage_.parameters())
        if (p.grad().defined()) p.grad().mul_(scale);
    }
    return norm;
  }

  const tapegrad::distributed::PipelineStepTimes& last_times() const { return last_->last_step_times(); }

 private:
  tapegrad::distributed::Pipeline& pipeline(int64_t micro_batches) {
    auto found = pipelines_.find(micro_batches);
    if (found == pipelines_.end()) {
      CharStage* stage = &stage_;
      auto forward = [stage](const std::vector<tapegrad::Tensor>& in, int64_t m) { return stage->forward(in, m); };
      found = pipelines_
                  .emplace(micro_batches,
                           std::make_unique<tapegrad::distributed::Pipeline>(
                               forward, group_, tapegrad::distributed::PipelineOptions().micro_batches(micro_batches)))
                  .first;
    }
    last_ = found->second.get();
    return *found->second;
  }
  CharStage& stage_;
  std::shared_ptr<tapegrad::distributed::ProcessGroup> group_;
  int64_t micro_batches_;
  std::map<int64_t, std::unique_ptr<tapegrad::distributed::Pipeline>> pipelines_;
  tapegrad::distributed::Pipeline* last_ = nullptr;
};

}  // namespace examples
