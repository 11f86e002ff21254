// The examples' --distributed flag: data-parallel training under an MPI launcher
// (mpirun -np N ./mlp_fashion --distributed). Each rank trains a DDP replica on its own shard;
// rank 0 alone prints, logs metrics and writes checkpoints. See docs/distributed.md.
#pragma once

#include <cstdio>
#include <cxxopts.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli_values.h"
#include "example_util.h"
#include "metrics_cli.h"
#include "tapegrad/distributed/ddp.h"
#include "tapegrad/distributed/sampler.h"
#include "tapegrad/tapegrad.h"

namespace examples {

inline void add_distributed_options(cxxopts::Options& cli) {
  cli.add_options()("distributed",
                    "data-parallel training over the processes of an MPI launch (mpirun -np N ... --distributed); "
                    "--batch-size is then per process");
}

// Epoch e's batches of this rank's shard: DistributedSampler(seed) cut into batches of
// batch_size. On one process it yields DataLoader(shuffle, seed)'s batches.
class ShardBatchSampler : public tapegrad::BatchSampler {
 public:
  ShardBatchSampler(int64_t dataset_size, int64_t batch_size, int ranks, int rank, uint64_t seed)
      : sampler_(dataset_size, ranks, rank, tapegrad::distributed::DistributedSamplerOptions().seed(seed)),
        batch_size_(batch_size) {}
  int64_t size() const override { return (sampler_.num_samples() + batch_size_ - 1) / batch_size_; }
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override {
    tapegrad::distributed::DistributedSampler sampler = sampler_;
    sampler.set_epoch(epoch);
    return sampler.batches(batch_size_);
  }

 private:
  tapegrad::distributed::DistributedSampler sampler_;
  int64_t batch_size_;
};

// This process's place in the job: rank 0 of 1 without --distributed. Holds the default process
// group for the life of the run and drops it (destroy_process_group) when it goes.
class DistributedRun {
 public:
  DistributedRun() = default;
  // With --distributed: joins the job (a UsageError when the build has no MPI) and silences stdout
  // on every rank but 0, so the examples' printf calls need no rank test.
  // `join_flag`: join the job without --distributed, for that flag's kind of multi-process run
  // (char_lstm's "--pipeline-stages"); null: only with --distributed.
  explicit DistributedRun(const cxxopts::ParseResult& args, const char* join_flag = nullptr) {
    if (!args.count("distributed") && join_flag == nullptr) return;
    const std::string flag = args.count("distributed") || join_flag == nullptr ? "--distributed" : join_flag;
    if (!tapegrad::distributed::is_available())
      throw UsageError(flag +
                       ": this build has no MPI support (configure with -DTAPEGRAD_DISTRIBUTED=ON and "
                       "an MPI installed, e.g. libopenmpi-dev)");
    group_ = tapegrad::distributed::init_process_group();
    if (group_->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
      throw tapegrad::Error(flag + ": rank " + std::to_string(group_->rank()) + " cannot silence stdout");
  }
  ~DistributedRun() {
    if (group_) {
      group_.reset();
      tapegrad::distributed::destroy_process_group();
    }
  }
  DistributedRun(const DistributedRun&) = delete;
  DistributedRun& operator=(const DistributedRun&) = delete;

  bool enabled() const { return group_ != nullptr; }
  int rank() const { return group_ ? group_->rank() : 0; }
  int size() const { return group_ ? group_->size() : 1; }
  bool is_main() const { return rank() == 0; }
  const std::shared_ptr<tapegrad::distributed::ProcessGroup>& group() const { return group_; }

  // Element-wise sums (or maxima) over the ranks, in float64; the values unchanged on one process.
  std::vector<double> sum(std::vector<double> values) const { return reduce(std::move(values), false); }
  double sum(double value) const { return sum(std::vector<double>{value})[0]; }
  double max(double value) const { return reduce({value}, true)[0]; }

  // --device: as examples::pick_device, except that "auto" and "cuda" (no index) give each process
  // of a distributed job the GPU local_rank() % device_count(), one GPU per rank.
  tapegrad::Device pick_device(const std::string& name) const {
    const tapegrad::Device device = examples::pick_device(name);
    if (!group_ || device.kind() != tapegrad::DeviceKind::CUDA || (name != "auto" && name != "cuda")) return device;
    return tapegrad::Device(tapegrad::DeviceKind::CUDA, group_->local_rank() % tapegrad::cuda::device_count());
  }

  // A DDP wrapper of `module` when distributed (it broadcasts rank 0's weights), else nothing.
  // `module` must outlive the wrapper; it need not be owned by a shared_ptr.
  std::unique_ptr<tapegrad::distributed::DistributedDataParallel> wrap(tapegrad::nn::Module& module) const {
    if (!group_) return nullptr;
    std::shared_ptr<tapegrad::nn::Module> view(&module, [](tapegrad::nn::Module*) {});
    return std::make_unique<tapegrad::distributed::DistributedDataParallel>(view, group_);
  }

  // This rank's shard of a data set as batches (ShardBatchSampler) when distributed, else nothing.
  std::unique_ptr<tapegrad::BatchSampler> shard(int64_t dataset_size, int64_t batch_size, uint64_t seed) const {
    if (!group_) return nullptr;
    return std::make_unique<ShardBatchSampler>(dataset_size, batch_size, size(), rank(), seed);
  }
  // Rows [begin, end) of n that this rank takes when the ranks split n rows evenly (for evaluation).
  std::pair<int64_t, int64_t> slice(int64_t n) const { return {n * rank() / size(), n * (rank() + 1) / size()}; }

  // The metrics logger of --metrics / --metrics-csv / --tensorboard on rank 0, one that writes
  // nothing on the other ranks (so two processes never write one file).
  std::unique_ptr<tapegrad::observe::MetricsLogger> open_metrics(const cxxopts::ParseResult& args) const {
    if (is_main()) return examples::open_metrics(args);
    return std::make_unique<tapegrad::observe::MetricsLogger>(tapegrad::observe::MetricsLoggerOptions{});
  }

  // " on N processes" for the banner line, "" on one.
  std::string describe() const {
    return group_ ? " on " + std::to_string(size()) + (size() == 1 ? " process" : " processes") : "";
  }

 private:
  std::vector<double> reduce(std::vector<double> values, bool max) const {
    if (!group_ || values.empty()) return values;
    using namespace tapegrad;
    Tensor t = tensor(values, {int64_t(values.size())});  // float64
    group_->all_reduce(t, max ? distributed::ReduceOp::Max : distributed::ReduceOp::Sum);
    const double* data = t.data<double>();
    return std::vector<double>(data, data + values.size());
  }

  std::shared_ptr<tapegrad::distributed::ProcessGroup> group_;
};

}  // namespace examples
