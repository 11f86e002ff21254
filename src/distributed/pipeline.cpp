// Pipeline parallelism, told as one step (include/tapegrad/distributed/pipeline.h).
//
// A step is a list of actions, the schedule: F(m) runs micro-batch m's forward on this stage, B(m)
// its backward. Stages are ranks; stage s receives activations from s - 1 and gradients from
// s + 1, and sends the other way. Sends are asynchronous and receives block, so a stage only ever
// waits for data it needs next; both schedules below order every stage's actions so that what a
// stage waits for is always eventually sent (the dependency graph has no cycle).
//
// Failure. A rank whose action throws sends an abort message to its neighbours; a neighbour that
// receives one (instead of the data it waited for) passes it on away from where it came from and
// stops. Ranks that never wait for the failed one finish their actions. Then every rank, failed or
// not, joins one all_reduce of a status vector (which rank failed, and the last stage's loss): so
// every rank learns of the failure without waiting on a message that will never come. Sends that
// nobody will receive remain; the group is aborted so that none of them blocks the exit.
#include "tapegrad/distributed/pipeline.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <utility>

#include "distributed/pipeline_wire.h"
#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/engine.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/core/error.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::distributed {

using ::tapegrad::detail::str_cat;
using Clock = std::chrono::steady_clock;

const char* pipeline_schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::GPipe ? "gpipe" : "1f1b";
}

double pipeline_bubble_bound(int64_t stages, int64_t micro_batches) {
  TG_CHECK(stages >= 1 && micro_batches >= 1, "pipeline_bubble_bound: stages and micro_batches must be >= 1, got ",
           stages, " and ", micro_batches);
  return double(stages - 1) / double(micro_batches + stages - 1);
}

namespace {

struct Action {
  bool forward;
  int64_t micro_batch;
};

// GPipe: all forwards, then all backwards. 1F1B: a warm-up of S - 1 - s forwards, then one forward
// and one backward in turn, then the backwards left. Backwards run in micro-batch order on every
// stage under both, so a stage receives gradients in the order its successor sends them.
std::vector<Action> schedule_of(PipelineSchedule schedule, int64_t stage, int64_t stages, int64_t micro_batches) {
  std::vector<Action> actions;
  if (schedule == PipelineSchedule::GPipe) {
    for (int64_t m = 0; m < micro_batches; ++m) actions.push_back({true, m});
    for (int64_t m = 0; m < micro_batches; ++m) actions.push_back({false, m});
    return actions;
  }
  const int64_t warmup = std::min(stages - 1 - stage, micro_batches);
  for (int64_t m = 0; m < warmup; ++m) actions.push_back({true, m});
  for (int64_t m = warmup; m < micro_batches; ++m) {
    actions.push_back({true, m});
    actions.push_back({false, m - warmup});
  }
  for (int64_t m = micro_batches - warmup; m < micro_batches; ++m) actions.push_back({false, m});
  return actions;
}

// A neighbour's abort, received where data was expected.
struct AbortReceived {
  int from_peer;
  int failed_rank;
};

// `n` rows along `dim` in `parts` nearly equal runs (torch.tensor_split's sizes).
std::vector<Tensor> split_rows(const Tensor& t, int64_t parts, int64_t dim, const char* what) {
  TG_CHECK(t.defined(), "Pipeline::step: the ", what, " is undefined");
  TG_CHECK(dim >= 0 && dim < t.dim(), "Pipeline::step: batch_dim ", dim, " is out of range for the ", what,
           " of shape ", shape_str(t.sizes()));
  const int64_t rows = t.size(dim);
  TG_CHECK(rows >= parts, "Pipeline::step: the ", what, " has ", rows, " rows along dim ", dim, ", fewer than the ",
           parts, " micro-batches");
  std::vector<Tensor> pieces;
  for (int64_t p = 0, start = 0; p < parts; ++p) {
    const int64_t length = rows / parts + (p < rows % parts ? 1 : 0);
    pieces.push_back(t.narrow(dim, start, length));
    start += length;
  }
  return pieces;
}

}  // namespace

// One step's state on this rank.
struct Pipeline::Run {
  Pipeline& pipe;
  ProcessGroup& group;
  const std::vector<MicroBatch>& inputs;
  const std::vector<MicroBatch>& targets;
  std::vector<double> weights;  // the last stage's loss weights
  int64_t step;
  bool training;  // forwards and backwards; else forwards only (eval_step)
  // Per micro-batch, what its backward needs: the received inputs that get gradients, the outputs
  // (or the weighted loss) to backpropagate from.
  struct InFlight {
    std::vector<Tensor> inputs;  // leaves whose .grad() goes back to the previous stage
    std::vector<Tensor> roots;   // outputs sent on that require grad, or the weighted loss
    bool alive = false;
  };
  std::vector<InFlight> slots;
  std::vector<Work> sends;
  double loss = 0;
  double waiting = 0, compute = 0;
  int64_t in_flight = 0, max_in_flight = 0;

  int prev() const { return pipe.stage_ - 1; }
  int next() const { return pipe.stage_ + 1; }
  std::string name() const { return str_cat("stage ", pipe.stage_, " of ", pipe.stages_); }

  // Messages from the previous stage (activations) and the next one (gradients), M of each.
  std::unique_ptr<detail::MessageReceiver> from_prev, from_next;

  detail::PipelineMessage receive(int peer, int64_t micro_batch, const char* what) {
    const Clock::time_point start = Clock::now();
    detail::MessageReceiver& from = peer == prev() ? *from_prev : *from_next;
    detail::PipelineMessage message = from.next(step, micro_batch, str_cat(name(), " receiving ", what));
    waiting += std::chrono::duration<double>(Clock::now() - start).count();
    if (message.kind == detail::PipelineMessage::kAbort) throw AbortReceived{peer, int(message.failed_rank)};
    return message;
  }

  void forward(int64_t m) {
    InFlight& slot = slots[size_t(m)];
    std::vector<Tensor> in;
    if (pipe.is_first()) {
      in = inputs[size_t(m)];
    } else {
      detail::PipelineMessage message = receive(prev(), m, "activations");
      for (size_t i = 0; i < message.tensors.size(); ++i) {
        Tensor t = message.tensors[i].to(pipe.options_.device_);
        if (training && message.requires_grad[i]) {
          t.requires_grad_(true);
          slot.inputs.push_back(t);
        }
        in.push_back(t);
      }
    }
    const Clock::time_point start = Clock::now();
    std::vector<Tensor> out;
    if (training && pipe.options_.checkpoint_ && !in.empty()) {
      const StageForward& fn = pipe.forward_;
      out = checkpoint([&fn, m](const std::vector<Tensor>& xs) { return fn(xs, m); }, in);
    } else {
      out = pipe.forward_(in, m);
    }
    if (pipe.is_last()) {
      const Tensor mb_loss = pipe.loss_(out, targets[size_t(m)], m);
      TG_CHECK(mb_loss.defined() && mb_loss.numel() == 1 && mb_loss.is_floating_point(), "Pipeline: ", name(),
               ": the loss of micro-batch ", m, " must be one floating-point value, got ",
               mb_loss.defined() ? str_cat(dtype_name(mb_loss.dtype()), " ", shape_str(mb_loss.sizes())) : "undefined");
      TG_CHECK(!training || mb_loss.requires_grad(), "Pipeline: ", name(), ": the loss of micro-batch ", m,
               " does not require grad (no parameter or received activation reaches it)");
      Tensor weighted = mb_loss * weights[size_t(m)];
      loss += weighted.item();
      if (training) slot.roots = {weighted};
    } else {
      std::vector<bool> requires_grad;
      for (const Tensor& t : out) {
        const bool rg = training && t.defined() && t.requires_grad() && t.is_floating_point();
        requires_grad.push_back(rg);
        if (rg) slot.roots.push_back(t);
      }
      std::vector<Work> works =
          detail::send_tensors(group, next(), pipe.options_.tag_, step, m, pipe.options_.micro_batches_, training, out,
                               requires_grad, str_cat(name(), " sending its outputs"));
      sends.insert(sends.end(), works.begin(), works.end());
    }
    compute += std::chrono::duration<double>(Clock::now() - start).count();
    if (!training) return;  // nothing is kept for a backward
    slot.alive = true;
    max_in_flight = std::max(max_in_flight, ++in_flight);
  }

  void backward(int64_t m) {
    InFlight& slot = slots[size_t(m)];
    std::vector<Tensor> grads;
    if (!pipe.is_last()) {
      detail::PipelineMessage message = receive(next(), m, "gradients");
      TG_CHECK(message.tensors.size() == slot.roots.size(), "Pipeline: ", name(), ": stage ", next(), " sent ",
               message.tensors.size(), " gradients for the ", slot.roots.size(), " outputs of micro-batch ", m,
               " that require grad");
      for (size_t i = 0; i < message.tensors.size(); ++i)
        grads.push_back(message.tensors[i].to(slot.roots[i].device(), slot.roots[i].dtype()));
    }
    const Clock::time_point start = Clock::now();
    if (!slot.roots.empty()) autograd::backward(slot.roots, grads);
    if (!pipe.is_first()) {
      std::vector<Tensor> input_grads;
      for (const Tensor& x : slot.inputs) input_grads.push_back(x.grad().defined() ? x.grad() : zeros_like(x));
      std::vector<Work> works = detail::send_tensors(
          group, prev(), pipe.options_.tag_, step, m, pipe.options_.micro_batches_, training, input_grads,
          std::vector<bool>(input_grads.size(), false), str_cat(name(), " sending gradients"));
      sends.insert(sends.end(), works.begin(), works.end());
    }
    compute += std::chrono::duration<double>(Clock::now() - start).count();
    slot = InFlight{};  // frees the micro-batch's activations
    --in_flight;
  }

  void check_arguments() {
    const PipelineOptions& o = pipe.options_;
    const size_t micro_batches = size_t(o.micro_batches_);
    TG_CHECK(!training || autograd::grad_enabled(),
             "Pipeline::step: grad mode is off (NoGradGuard or InferenceMode); step() "
             "runs forwards and backwards");
    if (pipe.is_first())
      TG_CHECK(inputs.size() == micro_batches, "Pipeline::step: the first stage needs ", micro_batches,
               " micro-batches of inputs, got ", inputs.size());
    if (!pipe.is_last()) return;
    TG_CHECK(pipe.loss_ != nullptr, "Pipeline::step: the last stage (rank ", pipe.stage_,
             ") has no loss: call set_loss first");
    TG_CHECK(targets.size() == micro_batches, "Pipeline::step: the last stage needs ", micro_batches,
             " micro-batches of targets, got ", targets.size());
    if (!weights.empty()) {
      TG_CHECK(weights.size() == micro_batches, "Pipeline::step: ", weights.size(), " loss weights for ", micro_batches,
               " micro-batches");
      return;
    }
    int64_t total = 0;
    std::vector<int64_t> rows;
    for (size_t m = 0; m < micro_batches; ++m) {
      TG_CHECK(!targets[m].empty() && targets[m][0].defined() && targets[m][0].dim() > o.batch_dim_,
               "Pipeline::step: micro-batch ", m, " has no first target with a dim ", o.batch_dim_,
               " to count its rows by (pass loss_weights)");
      rows.push_back(targets[m][0].size(o.batch_dim_));
      total += rows.back();
    }
    TG_CHECK(total > 0, "Pipeline::step: the targets hold no rows");
    for (int64_t r : rows) weights.push_back(double(r) / double(total));
  }

  void execute(const std::exception_ptr& setup_error) {
    if (setup_error) std::rethrow_exception(setup_error);
    check_arguments();
    const int64_t micro_batches = pipe.options_.micro_batches_;
    slots.resize(size_t(micro_batches));
    if (!pipe.is_first())
      from_prev = std::make_unique<detail::MessageReceiver>(group, prev(), pipe.options_.tag_, micro_batches,
                                                            micro_batches, training);
    if (!training) {
      for (int64_t m = 0; m < micro_batches; ++m) forward(m);
      return;
    }
    if (!pipe.is_last())
      from_next = std::make_unique<detail::MessageReceiver>(group, next(), pipe.options_.tag_, micro_batches,
                                                            micro_batches, training);
    for (const Action& a : schedule_of(pipe.options_.schedule_, pipe.stage_, pipe.stages_, micro_batches))
      a.forward ? forward(a.micro_batch) : backward(a.micro_batch);
  }
};

Pipeline::Pipeline(StageForward forward, std::shared_ptr<ProcessGroup> group, PipelineOptions options)
    : forward_(std::move(forward)), group_(std::move(group)), options_(std::move(options)) {
  TG_CHECK(forward_ != nullptr, "Pipeline: the stage's forward is null");
  TG_CHECK(group_ != nullptr, "Pipeline: the process group is null");
  TG_CHECK(options_.micro_batches_ >= 1, "Pipeline: micro_batches must be >= 1, got ", options_.micro_batches_);
  TG_CHECK(options_.tag_ >= 0 && options_.tag_ <= group_->max_tag(), "Pipeline: tag ", options_.tag_,
           " is outside [0, ", group_->max_tag(), "]");
  TG_CHECK(options_.batch_dim_ >= 0, "Pipeline: batch_dim must be >= 0, got ", options_.batch_dim_);
  stage_ = group_->rank();
  stages_ = group_->size();
}

Pipeline::Pipeline(std::shared_ptr<nn::UnaryModule> stage, std::shared_ptr<ProcessGroup> group, PipelineOptions options)
    : Pipeline(
          [stage](const std::vector<Tensor>& inputs, int64_t) {
            TG_CHECK(inputs.size() == 1, "Pipeline: a module stage takes one tensor, got ", inputs.size());
            return std::vector<Tensor>{stage->forward(inputs[0])};
          },
          std::move(group), std::move(options)) {
  TG_CHECK(stage != nullptr, "Pipeline: the stage module is null");
}

void Pipeline::set_loss(StageLoss loss) {
  TG_CHECK(loss != nullptr, "Pipeline::set_loss: the loss is null");
  loss_ = std::move(loss);
}

double Pipeline::step(const Tensor& input, const Tensor& target) {
  std::vector<MicroBatch> inputs, targets;
  // A bad input or target fails the step on every rank (with this one named), not here alone.
  std::exception_ptr error;
  try {
    if (is_first())
      for (Tensor& t : split_rows(input, options_.micro_batches_, options_.batch_dim_, "input")) inputs.push_back({t});
    if (is_last())
      for (Tensor& t : split_rows(target, options_.micro_batches_, options_.batch_dim_, "target"))
        targets.push_back({t});
  } catch (...) {
    error = std::current_exception();
  }
  return run_step(inputs, targets, {}, error, true);
}

double Pipeline::step(const std::vector<MicroBatch>& inputs, const std::vector<MicroBatch>& targets,
                      const std::vector<double>& loss_weights) {
  return run_step(inputs, targets, loss_weights, nullptr, true);
}

double Pipeline::eval_step(const std::vector<MicroBatch>& inputs, const std::vector<MicroBatch>& targets,
                           const std::vector<double>& loss_weights) {
  autograd::NoGradGuard no_grad;
  return run_step(inputs, targets, loss_weights, nullptr, false);
}

double Pipeline::run_step(const std::vector<MicroBatch>& inputs, const std::vector<MicroBatch>& targets,
                          const std::vector<double>& loss_weights, const std::exception_ptr& setup_error,
                          bool training) {
  const Clock::time_point start = Clock::now();
  Run run{*this, *group_, inputs, targets, loss_weights, steps_, training, {}, {}, 0, 0, 0, 0, 0, nullptr, nullptr};
  std::string error;
  bool failed_here = false;
  try {
    run.execute(setup_error);
  } catch (const AbortReceived& abort) {
    // Pass it on to the neighbour it did not come from, which may be waiting for this rank.
    const int onward = abort.from_peer == run.prev() ? run.next() : run.prev();
    if (onward >= 0 && onward < stages_) {
      try {
        detail::send_abort(*group_, onward, options_.tag_, steps_, abort.failed_rank);
      } catch (...) {
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
    failed_here = true;
  } catch (...) {
    error = "an exception that is not a std::exception";
    failed_here = true;
  }
  if (failed_here) {
    for (int peer : {run.prev(), run.next()}) {
      if (peer < 0 || peer >= stages_) continue;
      try {
        detail::send_abort(*group_, peer, options_.tag_, steps_, stage_);
      } catch (...) {
      }
    }
  }

  // Every rank, failed or not, reports here; [S] carries the loss from the last stage.
  Tensor status = zeros({int64_t(stages_) + 1}, kFloat64);
  if (failed_here) status.data<double>()[stage_] = 1;
  if (is_last() && !failed_here) status.data<double>()[stages_] = run.loss;
  try {
    group_->all_reduce(status);
  } catch (const Error& e) {
    TG_CHECK(false, "Pipeline: step ", steps_, " on rank ", stage_, ": ",
             failed_here ? str_cat("it failed (", error, "), and then ") : std::string(),
             "the ranks could not compare their status: ", e.what());
  }
  std::vector<int> failed;
  for (int r = 0; r < stages_; ++r)
    if (status.data<double>()[r] != 0) failed.push_back(r);
  if (!failed.empty()) {
    std::string ranks;
    for (int r : failed) ranks += str_cat(ranks.empty() ? "" : ", ", r);
    const std::string where = str_cat("step ", steps_, " failed on rank", failed.size() > 1 ? "s " : " ", ranks);
    group_->abort(str_cat("Pipeline ", where));
    ++steps_;
    if (failed_here)
      TG_CHECK(false, "Pipeline: ", where, " (stage ", stage_, " of ", stages_, "): ", error,
               "; the process group is no longer usable");
    TG_CHECK(false, "Pipeline: ", where, "; rank ", stage_, " (stage ", stage_, " of ", stages_,
             ") stopped its part of the step; the process group is no longer usable");
  }
  for (const Work& w : run.sends) w.wait();
  ++steps_;
  times_.total = std::chrono::duration<double>(Clock::now() - start).count();
  times_.compute = run.compute;
  times_.waiting = run.waiting;
  times_.max_in_flight = run.max_in_flight;
  return status.data<double>()[stages_];
}

std::vector<std::shared_ptr<nn::Sequential>> split_sequential(const nn::Sequential& model, int64_t stages,
                                                              const std::vector<int64_t>& boundaries) {
  const int64_t modules = int64_t(model.size());
  TG_CHECK(stages >= 1, "split_sequential: stages must be >= 1, got ", stages);
  TG_CHECK(modules >= stages, "split_sequential: ", modules, " modules cannot make ", stages,
           " stages (each needs at least one)");
  std::vector<int64_t> starts{0};
  if (!boundaries.empty()) {
    TG_CHECK(int64_t(boundaries.size()) == stages - 1, "split_sequential: ", stages, " stages need ", stages - 1,
             " boundaries, got ", boundaries.size());
    for (int64_t b : boundaries) {
      TG_CHECK(b > starts.back() && b < modules, "split_sequential: boundary ", b,
               " must be above the previous one and below ", modules);
      starts.push_back(b);
    }
  } else {
    // Greedy on the running parameter count: stage k starts at the first module where the count so
    // far reaches k/S of the total, keeping one module for each stage still to come.
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (size_t i = 0; i < model.size(); ++i) {
      int64_t n = 0;
      for (const Tensor& p : model[i]->parameters()) n += p.numel();
      counts.push_back(n);
      total += n;
    }
    int64_t so_far = 0;
    for (int64_t i = 0; i < modules && int64_t(starts.size()) < stages; ++i) {
      so_far += counts[size_t(i)];
      const int64_t stage = int64_t(starts.size());
      const bool must_start = modules - (i + 1) == stages - stage;  // one module left per stage to come
      const bool share_reached = double(so_far) * double(stages) >= double(stage) * double(total);
      if (i + 1 < modules && (must_start || (share_reached && total > 0))) starts.push_back(i + 1);
    }
  }
  std::vector<std::shared_ptr<nn::Sequential>> parts;
  for (size_t k = 0; k < starts.size(); ++k) {
    auto part = std::make_shared<nn::Sequential>();
    const int64_t end = k + 1 < starts.size() ? starts[k + 1] : modules;
    for (int64_t i = starts[k]; i < end; ++i) part->push_back(model[size_t(i)]);
    parts.push_back(part);
  }
  return parts;
}

}  // namespace tapegrad::distributed
