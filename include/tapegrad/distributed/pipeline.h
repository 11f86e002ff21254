// Pipeline parallelism (torch.distributed.pipelining's PipelineStage with ScheduleGPipe and
// Schedule1F1B): a model cut into consecutive stages, stage s on rank s of a process group. A batch
// is split into micro-batches that flow through the stages; stage s sends its outputs to s + 1
// and, in the backward pass, the gradients of its inputs to s - 1. See docs/distributed.md.
//
//   auto group = distributed::init_process_group();               // one rank per stage
//   auto stages = distributed::split_sequential(model, group->size());
//   distributed::Pipeline pipe(stages[group->rank()], group,
//                              distributed::PipelineOptions().micro_batches(4));
//   pipe.set_loss([](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int) {
//     return cross_entropy(out[0], target[0]);                   // the last stage's loss
//   });
//   optim::Adam opt(stages[group->rank()]->parameters());        // each rank steps its stage
//   double loss = pipe.step(x, y);   // x used on the first stage, y on the last; every rank calls it
//   opt.step(); opt.zero_grad();
//
// Gradients are exact: the loss of micro-batch m is weighted by its share of the batch (its rows
// over the batch's rows, or the weights given to step()), so the stages' .grad() sum to what one
// process computes on the whole batch with a mean loss, to float rounding. They accumulate into
// .grad() like backward() does: zero them between steps.
//
// Schedules. GPipe: every micro-batch's forward, then every backward. 1F1B (the default): stage s
// runs S - 1 - s forwards first (the warm-up), then alternates one forward and one backward, then
// the remaining backwards; it keeps at most S - s micro-batches' activations alive instead of M.
// Both have the same bubble, (S - 1) / (M + S - 1) of each stage's step with equal stages.
//
// What travels: every tensor a stage's forward returns goes to the next stage (any number, dtype
// and shape, which may change from step to step, e.g. sequence lengths); those that are floating
// point and require grad are the ones whose gradients come back. Integer tensors (token ids,
// lengths) pass through without gradients. Tensors on a CUDA device are staged through host memory
// (MPI carries CPU tensors) and arrive on PipelineOptions::device.
//
// Failure: if a stage's forward, backward or loss throws on rank r, r tells its neighbours, they
// pass it on, and every rank's step() throws a tapegrad::Error naming rank r and the step (rank r's
// message also holds the original error): no rank hangs. The group is then unusable (its sends and
// receives in flight were abandoned), as after a timeout. Every rank must call step() the same
// number of times, with the same micro_batches.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/distributed/process_group.h"
#include "tapegrad/nn/layers.h"

namespace tapegrad::distributed {

enum class PipelineSchedule { GPipe, OneFOneB };
const char* pipeline_schedule_name(PipelineSchedule schedule);  // "gpipe", "1f1b"

struct PipelineOptions {
  PipelineOptions& micro_batches(int64_t v) {
    micro_batches_ = v;
    return *this;
  }
  PipelineOptions& schedule(PipelineSchedule v) {
    schedule_ = v;
    return *this;
  }
  // Recompute the stage's forward in its backward pass (tapegrad::checkpoint around the stage), so
  // a stage keeps only its inputs per micro-batch in flight, not its activations.
  PipelineOptions& checkpoint(bool v) {
    checkpoint_ = v;
    return *this;
  }
  // The dim along which step(Tensor, Tensor) splits its input and target, and along which a
  // micro-batch's rows are counted for its loss weight.
  PipelineOptions& batch_dim(int64_t v) {
    batch_dim_ = v;
    return *this;
  }
  // Where the tensors this stage receives are put (the stage's device).
  PipelineOptions& device(Device v) {
    device_ = v;
    return *this;
  }
  // The p2p tag of the pipeline's messages (a user's own sends between neighbours should use another).
  PipelineOptions& tag(int v) {
    tag_ = v;
    return *this;
  }
  int64_t micro_batches_ = 1;
  PipelineSchedule schedule_ = PipelineSchedule::OneFOneB;
  bool checkpoint_ = false;
  int64_t batch_dim_ = 0;
  Device device_ = kCPU;
  int tag_ = 0;
};

// One stage's forward: its inputs (for the first stage, a micro-batch as given to step(); for the
// others, what the previous stage returned) and the micro-batch's index, to its outputs. A stage
// that keeps state between steps per micro-batch (an LSTM's carried (h, c)) uses the index.
using StageForward = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, int64_t micro_batch)>;
// The last stage's loss for one micro-batch: its outputs and the targets given to step().
using StageLoss =
    std::function<Tensor(const std::vector<Tensor>& outputs, const std::vector<Tensor>& targets, int64_t micro_batch)>;
using MicroBatch = std::vector<Tensor>;

// Where the time of the last step went, on this rank (seconds).
struct PipelineStepTimes {
  double total = 0;           // the whole step() (the final status exchange included)
  double compute = 0;         // running forwards, losses and backwards
  double waiting = 0;         // blocked on a receive from a neighbour: this rank's bubble
  int64_t max_in_flight = 0;  // micro-batches whose activations were held at once (M for GPipe)
};

class Pipeline {
 public:
  // Stage group->rank() of group->size(). Throws for a null group or stage, micro_batches < 1, or a
  // tag outside [0, group->max_tag()].
  Pipeline(StageForward forward, std::shared_ptr<ProcessGroup> group, PipelineOptions options = {});
  // A module stage (forward: its only input to its only output).
  Pipeline(std::shared_ptr<nn::UnaryModule> stage, std::shared_ptr<ProcessGroup> group, PipelineOptions options = {});

  // The last stage's loss per micro-batch (required there; ignored elsewhere).
  void set_loss(StageLoss loss);

  // One training step's forwards and backwards over micro_batches micro-batches; every rank calls
  // it. `inputs` (first stage) and `targets` (last stage) hold one MicroBatch each per micro-batch;
  // other ranks pass empty lists. `loss_weights` (last stage): micro-batch m's loss is scaled by
  // loss_weights[m]; empty: by the rows of its first target along batch_dim over all of them.
  // Returns the weighted sum of the micro-batch losses (the batch's loss) on every rank.
  double step(const std::vector<MicroBatch>& inputs, const std::vector<MicroBatch>& targets,
              const std::vector<double>& loss_weights = {});
  // Splits `input` (first stage) and `target` (last stage) along batch_dim into micro_batches
  // nearly equal parts (torch.tensor_split's sizes; fewer rows than micro-batches throws).
  double step(const Tensor& input, const Tensor& target);
  // The forwards alone (torch's schedule.eval()), with grad mode off: every stage's forward of
  // every micro-batch in turn and the last stage's losses, weighted as by step(); nothing is kept
  // for a backward and no .grad() changes. Returns the weighted loss on every rank; counts as a step.
  double eval_step(const std::vector<MicroBatch>& inputs, const std::vector<MicroBatch>& targets,
                   const std::vector<double>& loss_weights = {});

  int stage() const { return stage_; }
  int num_stages() const { return stages_; }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  const PipelineOptions& options() const { return options_; }
  const PipelineStepTimes& last_step_times() const { return times_; }
  int64_t steps() const { return steps_; }

  struct Run;  // one step's state (pipeline.cpp)

 private:
  double run_step(const std::vector<MicroBatch>& inputs, const std::vector<MicroBatch>& targets,
                  const std::vector<double>& loss_weights, const std::exception_ptr& setup_error, bool training);

  StageForward forward_;
  StageLoss loss_;
  std::shared_ptr<ProcessGroup> group_;
  PipelineOptions options_;
  int stage_ = 0, stages_ = 1;
  int64_t steps_ = 0;
  PipelineStepTimes times_;
};

// The idle fraction of each stage's step for S equal stages and M micro-batches: (S-1)/(M+S-1).
double pipeline_bubble_bound(int64_t stages, int64_t micro_batches);

// Cuts `model` into `stages` consecutive runs of its modules (each a new Sequential sharing them),
// balancing parameter counts (every stage gets at least one module). `boundaries`, when given,
// names the first module of stages 1..S-1 instead. Throws when there are fewer modules than stages.
std::vector<std::shared_ptr<nn::Sequential>> split_sequential(const nn::Sequential& model, int64_t stages,
                                                              const std::vector<int64_t>& boundaries = {});

}  // namespace tapegrad::distributed
