// The named model configurations every benchmark uses (Google Benchmark suites, the GPU-vs-CPU
// sweep, the LibTorch/PyTorch comparison), so that "lstm_small at batch 16" means one thing
// everywhere. Each model is built with PyTorch's parameter names so a safetensors file of its
// weights loads unchanged on the PyTorch side.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/cuda/counters.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad::bench {

enum class ModelKind { Mlp, Lstm, CharLm };

// The shape of one model. MLP: Linear(in, h1)-ReLU-...-Linear(hk, classes). LSTM: one LSTM layer
// over a time-major sequence [T, B, I], then Linear(H, classes) on the last hidden state.
// CharLm: the character-level language model of examples/char_lstm, Embedding(V, E) (row 0 the
// padding id) -> LSTM(E, H, layers) over variable lengths -> Linear(H, V) at every step, trained
// on next-character cross-entropy with padded steps ignored (input_size is E, num_classes is V,
// seq_len the longest chunk: the BPTT length).
struct Batch;

struct ModelShape {
  ModelKind kind = ModelKind::Mlp;
  std::vector<int64_t> mlp_sizes;                        // MLP: in, hidden..., classes
  int64_t input_size = 0, hidden_size = 0, seq_len = 0;  // LSTM, CharLm
  int64_t num_layers = 1;                                // CharLm
  int64_t num_classes = 10;

  static ModelShape mlp(std::vector<int64_t> sizes);
  static ModelShape lstm(int64_t input_size, int64_t hidden_size, int64_t seq_len, int64_t num_classes = 10);
  static ModelShape char_lm(int64_t vocab, int64_t embedding, int64_t hidden, int64_t layers, int64_t bptt);
  // "mlp 1000-512-10", "lstm I=32 H=128 T=50" or "char lm V=116 E=64 H=256x2 T<=128".
  std::string describe() const;
  // Multiply-adds x 2 of one training step (forward + both backward GEMMs) per example; the
  // elementwise work is left out, so it is a floor on the real count. A CharLm example is one
  // sequence of the mean chunk length (mean_char_chunk_length()): padded steps are not work.
  double gemm_flops_per_example() const;
  // Multiply-adds x 2 of the forward alone per example (what an inference call computes), counted
  // the same way: GEMMs only, a CharLm example of the mean chunk length.
  double gemm_forward_flops_per_example() const;
  // The same two for the examples of one batch: a CharLm example is then one of that batch's own
  // sequences (its lengths' mean) rather than one of the corpus's mean length. Other kinds do not
  // depend on the batch.
  double gemm_flops_per_example(const Batch& batch) const;
  double gemm_forward_flops_per_example(const Batch& batch) const;

 private:
  double gemm_flops_per_example_of_length(double char_steps) const;
  double gemm_forward_flops_per_example_of_length(double char_steps) const;
};

// CharLm batches take their lengths from the fortunes corpus: the chunks examples/char_lstm trains
// on (each record's characters plus its end, cut into pieces of at most `bptt`), as 32 quantiles.
// Each batch draws one quantile and its rows draw from it and its two neighbours, which is what
// length bucketing makes of a batch (a few percent of padding, like the example's 9%).
double mean_char_chunk_length(int64_t bptt);

// A named configuration: one model, the batch sizes it is benchmarked at (the first is the
// headline one), and its optimiser (Adam) learning rate.
struct NamedConfig {
  std::string name;
  std::string summary;  // one line for tables
  ModelShape shape;
  std::vector<int64_t> batch_sizes;
  double lr = 1e-3;
};

// mlp_seed, mlp_fashion, lstm_row, lstm_small, lstm_large, char_lstm, in that order.
const std::vector<NamedConfig>& named_configs();
// Throws tapegrad::Error naming the known configurations when `name` is not one of them.
const NamedConfig& named_config(const std::string& name);

// The model of `shape` on the CPU, initialised from `generator` (PyTorch's default init).
// MLP: a Sequential with children "0", "1", ... (so "0.weight"); LSTM: children "lstm" and "fc";
// CharLm: "embedding", "lstm" and "head", as examples/char_lstm names them.
std::shared_ptr<nn::UnaryModule> build_model(const ModelShape& shape, Generator* generator = nullptr);

// Inputs: MLP [B, in] float32, LSTM [T, B, I] float32; targets int64 [B] in [0, classes).
// CharLm: input ids int64 [T, B] (T = seq_len), targets int64 [T, B] (-100 at padded steps),
// lengths int64 [B]; the batch is as long as its longest row (at most T).
Shape input_shape(const ModelShape& shape, int64_t batch);
struct Batch {
  Tensor x, y;
  Tensor lengths;  // CharLm only, on the CPU
};
// `count` random batches on the CPU (standard normal inputs, uniform labels; CharLm: uniform ids
// in [1, V) and corpus-like lengths) from `generator`.
std::vector<Batch> make_batches(const ModelShape& shape, int64_t batch, int count, Generator* generator = nullptr);

// The GEMM work per example of the pool's median batch (by that work; training steps, or the forward
// alone): what the median time of steps that cycle through the pool is to be divided into, since a
// step's time follows its batch's work. A CharLm pool mixes lengths: the comparison's 8 batches of
// char_lstm:32 are six of 128 steps, one of 68 and one of 26 (a mean of 106 real steps against
// the corpus's 93), and its median step is one of 128 steps; measured against the corpus mean, its
// GFLOP/s read 27% low. For the other kinds every batch does the same work.
double median_batch_gemm_flops_per_example(const ModelShape& shape, const std::vector<Batch>& pool,
                                           bool forward_only = false);
// The mean over the pool instead: for a mean step time over steps that cycle through it (Google
// Benchmark's iterations).
double mean_batch_gemm_flops_per_example(const ModelShape& shape, const std::vector<Batch>& pool);
// The logits `model` (built by build_model for `shape`) computes for one batch, on its device: what
// the training loss compares with the targets. MLP and LSTM [B, classes]; CharLm [T * B, V], each
// row stopped at its length (padded steps give the head's bias alone).
Tensor model_output(const ModelShape& shape, nn::UnaryModule& model, const Batch& batch);
// The training loss of `model` (built by build_model for `shape`) on one batch on its device:
// cross-entropy of the logits against the targets (CharLm: over every step, padding ignored).
Tensor training_loss(const ModelShape& shape, nn::UnaryModule& model, const Batch& batch);

// Wall time of each part of one training step, in ms (TrainingRun::phased_step, and the LibTorch
// side's equivalent), so that a comparison can say where a step's time goes.
struct StepPhases {
  double forward_ms = 0;    // model forward and cross-entropy loss
  double backward_ms = 0;   // gradients to none, then backward
  double optimizer_ms = 0;  // the Adam step
  double total_ms() const { return forward_ms + backward_ms + optimizer_ms; }
};

// One model, its Adam optimiser and a pool of batches on one device: the unit every benchmark
// times. A step is forward + cross-entropy + zero_grad + backward + Adam step, on data already on
// the device; batch i of the pool is used at step i (mod pool size).
class TrainingRun {
 public:
  // Builds the model from `seed` (or loads `weights` when given, a state dict with the model's
  // names) and `pool` batches from `seed + 1`, then moves everything to `device`.
  TrainingRun(const ModelShape& shape, int64_t batch, Device device, uint64_t seed = 0, double lr = 1e-3, int pool = 8,
              const StateDict* weights = nullptr);
  // The model loaded from `weights` and trained on `batches` (CPU tensors, copied to `device`).
  TrainingRun(const ModelShape& shape, const StateDict& weights, const std::vector<Batch>& batches, Device device,
              double lr = 1e-3);
  // Runs one training step and returns its loss (a device scalar; reading it synchronises).
  Tensor step();
  // The same step (the same calls in the same order, on the same next batch), with a steady clock
  // read after each phase, the device synchronised before each read; the times go to `phases`. Kept
  // apart from step() so that the timing of whole steps carries no clock reads or synchronises.
  // Eager steps only: a replayed graph has no phases to tell apart.
  Tensor phased_step(StepPhases* phases);
  // From now on each step() copies its batch into captured input tensors and replays one CUDA
  // graph of the whole step (forward, loss, backward, Adam; docs/cuda_graphs.md). The optimiser
  // becomes capturable (its state carried over) and one eager warm-up step on the captured inputs
  // runs first. CUDA and fixed-shape configurations only (not CharLm, whose batches vary in length).
  void capture_graph();
  bool replays_graph() const { return graph_ != nullptr; }
  // Blocks until every step issued so far has finished on the device (a no-op cost on the CPU).
  void synchronize() const;

  nn::UnaryModule& model() { return *model_; }
  const std::vector<Batch>& batches() const { return batches_; }  // on the device
  int64_t steps_done() const { return steps_; }
  Device device() const { return device_; }

 private:
  ModelShape shape_;
  std::shared_ptr<nn::UnaryModule> model_;
  std::unique_ptr<optim::Adam> optimizer_;
  std::vector<Batch> batches_;
  Device device_;
  int64_t steps_ = 0;
  // capture_graph(): the graph, the inputs it reads and the loss it writes.
  std::unique_ptr<cuda::Graph> graph_;
  Batch graph_batch_;
  Tensor graph_loss_;
};

// Waits for all work queued on `device` (every stream of that GPU); returns at once on the CPU.
void synchronize(Device device);

// What one more training step of `run` asks of the GPU (tapegrad/cuda/counters.h): kernel
// launches, GEMMs, copies and host synchronisations. The loss is not read, as in a training loop
// that does not print every step. All zero on the CPU. Run it after a warm-up step (the first
// step allocates the optimiser state).
cuda::Counters step_counts(TrainingRun& run);

}  // namespace tapegrad::bench
