// ZeroRedundancyOptimizer: ZeRO stage 1, as torch.distributed.optim.ZeroRedundancyOptimizer. The
// parameters are partitioned across the ranks of a process group (whole tensors); each rank's local
// optimiser (Adam, AdamW, SGD, built by a factory) holds state only for the parameters it owns, so
// the optimiser state per rank is about 1/size of a plain optimiser's. See docs/distributed.md.
//
//   auto group = distributed::init_process_group();
//   distributed::DistributedDataParallel ddp(model, group);        // averages the gradients
//   distributed::ZeroRedundancyOptimizer opt(model->parameters(), group,
//       [](std::vector<optim::ParamGroup> groups) {
//         return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions().lr(1e-3));
//       });
//   loss.backward(); opt.step(); opt.zero_grad();
//
// step() runs the local optimiser on this rank's shard, then broadcasts every parameter from its
// owner, so all replicas hold the same values. The gradients must already be the same on every rank
// (DDP's average, or an all_reduce): ZeRO stage 1 shards only the optimiser state.
//
// It is an optim::Optimizer: param_groups() are the full groups (every parameter), so a scheduler
// made for it sets the learning rate of every rank's shard; each step copies the groups' options to
// the local optimiser. zero_grad() clears every parameter's gradient.
//
// Partition (PyTorch's): group by group, parameters by decreasing element count (ties in list
// order), each to the rank that so far owns the fewest elements (ties: the lowest rank). It depends
// only on the parameters' sizes, so every rank computes the same one; the constructor checks that
// every rank passed parameters of the same sizes. A rank may own nothing (more ranks than
// parameters): its local optimiser is then null and it only receives broadcasts.
//
// Every rank must call the constructor, step() and consolidate_state_dict() together (they are
// collectives); sharded_state_dict() and load_sharded_state_dict() are local. Not supported yet:
// add_param_group after construction, bucketed or overlapped broadcasts (one broadcast per
// parameter), parameters_as_bucket_view, ZeRO stages 2 and 3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/distributed/process_group.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::distributed {

// Builds the local optimiser over the given groups (each with every option set, from the full
// groups); also called once with all parameters at construction, which allocates no state, to fill
// and check the groups' options, and with a one-element stand-in parameter to check options.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // Parameters that do not require grad are skipped (they have nothing to update), as are those of
  // a group that then has none. Throws tapegrad::Error for no parameters at all, an undefined one,
  // one listed twice (in a group or across groups), a null group or factory, options the factory's
  // optimiser refuses, or ranks that passed different parameter sizes.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group, OptimizerFactory factory);
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, std::shared_ptr<ProcessGroup> group,
                          OptimizerFactory factory);

  // The local optimiser's step on this rank's shard (after copying the groups' options to it),
  // then a broadcast of every parameter from its owner. Throws on every rank, before any parameter
  // moves, when a group holds an invalid option. If the local step throws on some ranks (a gradient
  // of the wrong shape, say), every rank throws instead of broadcasting, naming those ranks, the
  // step (counting from 0) and, on each of them, its error; the group stays usable, but the
  // failing owners' parameters may have been partly updated: reload a checkpoint. (One all_reduce
  // of a status flag per step finds this out.)
  void step() override;

  // The rank that owns params()[index] / `param` (throws for one this optimiser does not hold).
  int rank_of(size_t index) const;
  int rank_of(const Tensor& param) const;
  // Indices into params() of the parameters this rank owns, in increasing order.
  const std::vector<size_t>& owned() const { return owned_; }
  // The local optimiser over this rank's shard; null when this rank owns no parameter.
  optim::Optimizer* local_optimizer() const { return local_.get(); }
  // Bytes of optimiser state this rank holds (its local optimiser's state_dict tensors).
  int64_t local_state_bytes() const;

  // Collective: gathers every rank's shard of the state on rank `to`, whose state_dict() then is the
  // state a plain optimiser over params() would have (loadable into one). state_dict() on another
  // rank, or after a later step(), throws. load_state_dict() takes such a full state on every rank
  // and keeps this rank's shard.
  void consolidate_state_dict(int to = 0);

  // Sharded checkpoints: this rank's part of the state alone, no communication. The entries are
  // those of state_dict() (the same keys, so global parameter indices) for the parameters this rank
  // owns, the groups' entries, and "zero.world_size", "zero.rank" and "zero.owners" (the partition).
  // load_sharded_state_dict() takes the dict this rank saved and restores its shard and the groups'
  // options; it refuses, changing nothing, a dict saved by another world size (naming both sizes and
  // the way out: load a consolidated state dict), by another rank, or under another partition.
  StateDict sharded_state_dict() const;
  void load_sharded_state_dict(const StateDict& state);
  int64_t steps() const { return steps_; }

  const ProcessGroup& process_group() const { return *group_; }

 protected:
  const std::vector<std::string>& group_options() const override { return options_; }
  void fill_defaults(optim::ParamGroup& group) const override;
  void check_group(const optim::ParamGroup& group, const std::string& where) const override;
  StateDict param_state_dict() const override;
  void load_param_state(const StateDict& entries, const std::vector<optim::ParamGroup>& groups) override;

 private:
  void partition();
  void check_same_sizes_on_every_rank();
  void sync_local_groups();

  std::shared_ptr<ProcessGroup> group_;
  OptimizerFactory factory_;
  std::vector<std::string> options_;  // the options the local optimiser's groups hold
  std::vector<int> owner_;            // per parameter
  std::vector<size_t> owned_;         // global indices of this rank's parameters
  std::vector<size_t> local_index_;   // per parameter: its index in the local optimiser (if owned)
  std::vector<size_t> local_groups_;  // per local group: the global group it mirrors
  std::unique_ptr<optim::Optimizer> local_;
  StateDict consolidated_;  // per-parameter entries with global indices, on rank `consolidated_to_`
  int consolidated_to_ = -1;
  int64_t steps_ = 0;
};

// Bytes of the per-parameter state of `optimizer` (the tensors of its state_dict() besides the
// "param_groups." entries), so a sharded optimiser's ranks can be compared with a plain one.
int64_t optimizer_state_bytes(const optim::Optimizer& optimizer);

}  // namespace tapegrad::distributed
