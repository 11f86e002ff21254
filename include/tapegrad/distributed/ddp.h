// DistributedDataParallel: data-parallel training of one Module over a ProcessGroup, as PyTorch's
// torch.nn.parallel.DistributedDataParallel. Each rank runs the same model on its own slice of the
// batch; after backward every rank holds the gradients averaged over all ranks, so identical
// optimiser steps keep the replicas identical.
//
//   auto group = distributed::init_process_group();
//   auto model = std::make_shared<nn::Sequential>(...);
//   distributed::DistributedDataParallel ddp(model, group);   // rank 0's weights everywhere
//   optim::Adam opt(model->parameters());
//   for (...) {
//     Tensor loss = cross_entropy(ddp.forward(x_of_this_rank), y_of_this_rank);
//     loss.backward();            // all-reduces overlap the rest of backward
//     opt.step(); opt.zero_grad();
//   }
//
// How: construction checks that every rank has the same parameters (names' order, shapes,
// dtypes) and broadcasts parameters and buffers from rank 0. Gradients are grouped into buckets of
// about bucket_cap_mb, in reverse registration order (roughly the order backward produces them);
// a hook on each parameter (autograd::register_post_accumulate_grad_hook) notes its gradient, and a
// bucket whose gradients are all in is flattened and its all-reduce (average) started while
// backward goes on. Buckets start in the same order on every rank. The last gradient waits for all
// buckets and writes the averages back into .grad(), so when backward() returns the gradients are
// reduced (clip them, step).
//
// Modules whose forward is not Tensor -> Tensor (the LSTM, a custom model): call the module yourself
// and pass its outputs (or the loss) to prepare_for_backward() before backward; it is required with
// find_unused_parameters, optional otherwise.
//
// Every rank must run backward over the same parameters unless find_unused_parameters is set: a
// parameter that gets no gradient leaves its bucket waiting, and the next forward() /
// prepare_for_backward() throws, naming it. With find_unused_parameters, parameters the outputs do
// not reach are counted as ready at once (their local gradient taken as zero); one used by no rank
// keeps an undefined gradient, one used by some ranks gets the average over all ranks.
//
// Iterations are numbered (each forward() / prepare_for_backward() outside no_sync()) and every
// reduction's collectives carry the number: a rank that ran a forward without its backward makes
// the next backward throw on every rank, naming each rank's iteration, instead of averaging
// gradients of different iterations (needs ProcessGroupOptions::check_collectives, the default).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/autograd/hooks.h"
#include "tapegrad/distributed/process_group.h"
#include "tapegrad/nn/module.h"

namespace tapegrad::distributed {

struct DDPOptions {
  DDPOptions& bucket_cap_mb(double v) {
    bucket_cap_mb_ = v;
    return *this;
  }
  DDPOptions& find_unused_parameters(bool v) {
    find_unused_parameters_ = v;
    return *this;
  }
  DDPOptions& broadcast_buffers(bool v) {
    broadcast_buffers_ = v;
    return *this;
  }  // at each forward()
  double bucket_cap_mb_ = 25.0;
  bool find_unused_parameters_ = false;
  bool broadcast_buffers_ = true;
};

class DistributedDataParallel {
 public:
  // Collective: every rank constructs its DDP at the same point. Throws tapegrad::Error on every
  // rank when the ranks' parameters differ (naming the first that does), for a bucket cap <= 0,
  // or for a null module or group.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();  // removes its hooks
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The wrapped module's forward (it must be a UnaryModule), then prepare_for_backward(output).
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  // Starts an iteration: checks the previous one finished, and with find_unused_parameters finds
  // the parameters `outputs` do not depend on. Inside no_sync() it does nothing.
  void prepare_for_backward(const std::vector<Tensor>& outputs);

  // Gradient accumulation: backward passes made while the guard lives only accumulate locally; the
  // first backward after it reduces the sum.
  //   { auto guard = ddp.no_sync(); loss1.backward(); }  loss2.backward();
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }

  // The buckets, in launch order: the dotted names of their parameters.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // For the last reduced iteration, per bucket: when it was ready (its all-reduce queued, during
  // backward), when communication began, and when it finished.
  struct BucketTiming {
    std::chrono::steady_clock::time_point ready, started, finished;
  };
  std::vector<BucketTiming> last_bucket_timings() const;

  struct Reducer;

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
  std::vector<autograd::RemovableHandle> handles_;
};

}  // namespace tapegrad::distributed
