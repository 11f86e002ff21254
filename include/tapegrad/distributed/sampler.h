// DistributedSampler: which examples each rank reads, as PyTorch's
// torch.utils.data.distributed.DistributedSampler. Each epoch, the dataset's indices are shuffled
// from (seed + epoch) (the same order DataLoader(shuffle, seed) uses), the tail is padded by
// repeating the first indices (or dropped, with drop_last) so every rank gets num_samples(), and
// rank r takes positions r, r + N, r + 2N, ... The shards are disjoint (apart from the padding),
// and an epoch's order depends only on (seed, epoch, rank, num_replicas): after a resume,
// set_epoch(e) gives exactly the order the interrupted run had.
//
//   distributed::DistributedSampler sampler(dataset.size(), group->size(), group->rank(),
//                                           distributed::DistributedSamplerOptions().seed(7));
//   for (int64_t epoch = start; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);
//     for (const auto& batch : sampler.batches(64)) { Example e = dataset.get_batch(batch); ... }
//   }
#pragma once

#include <cstdint>
#include <vector>

namespace tapegrad::distributed {

struct DistributedSamplerOptions {
  DistributedSamplerOptions& shuffle(bool v) {
    shuffle_ = v;
    return *this;
  }
  DistributedSamplerOptions& seed(uint64_t v) {
    seed_ = v;
    return *this;
  }
  DistributedSamplerOptions& drop_last(bool v) {
    drop_last_ = v;
    return *this;
  }
  bool shuffle_ = true;
  uint64_t seed_ = 0;
  bool drop_last_ = false;  // drop the tail that does not divide evenly, instead of padding
};

class DistributedSampler {
 public:
  // Throws tapegrad::Error for a negative size, num_replicas < 1, or rank outside [0, num_replicas).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, DistributedSamplerOptions options = {});

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }  // per rank, each epoch
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  // This rank's indices for the current epoch / for `epoch`.
  std::vector<int64_t> indices() const { return indices(epoch_); }
  std::vector<int64_t> indices(int64_t epoch) const;
  // indices() cut into batches of batch_size (the last smaller, or dropped with drop_last).
  std::vector<std::vector<int64_t>> batches(int64_t batch_size, bool drop_last = false) const;

 private:
  int64_t dataset_size_;
  int num_replicas_, rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace tapegrad::distributed
