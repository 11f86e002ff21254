// Batch samplers: which dataset indices form each batch of an epoch. BucketBatchSampler groups
// sequences of similar length so that a padded batch wastes few timesteps.
#pragma once

#include <cstdint>
#include <vector>

namespace tapegrad {

// The batches of one epoch as lists of dataset indices, a pure function of the epoch number, so
// that a run resumes reproducibly. DataLoader(dataset, batch_sampler, options) consumes one.
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  virtual int64_t size() const = 0;  // batches per epoch (the same for every epoch)
  virtual std::vector<std::vector<int64_t>> batches(int64_t epoch) const = 0;
};

struct BucketBatchSamplerOptions {
  int64_t batch_size = 32;
  // false: plain random batches over all sequences (one bucket), to compare padding with.
  bool bucketing = true;
  // Buckets are runs of this many batches' worth of sequences in length order (ties by index),
  // unless `boundaries` is given. More batches per bucket: more randomness, more padding.
  int64_t batches_per_bucket = 8;
  // When not empty, strictly increasing lengths b0 < b1 < ...: bucket 0 holds lengths < b0,
  // bucket k lengths in [b(k-1), b(k)), the last bucket lengths >= the last boundary (tf.data's
  // bucket_by_sequence_length). Empty buckets are skipped.
  std::vector<int64_t> boundaries;
  // Shuffle within buckets and the order of all batches, from Generator(seed + epoch). Without it
  // batches come in length order (shortest first), e.g. for evaluation.
  bool shuffle = true;
  bool drop_last = false;  // drop each bucket's final batch when it is smaller than batch_size
  uint64_t seed = 0;
};

// Every index appears exactly once per epoch (except those drop_last drops); each batch comes from
// one bucket; the same seed and epoch give the same batches, and epochs differ when shuffling.
//
//   BucketBatchSamplerOptions o;
//   o.batch_size = 32;
//   BucketBatchSampler sampler(corpus.train().lengths(), o);
//   DataLoader loader(corpus.train(), sampler);   // epoch e of the loader uses batches(e)
//   // or by hand, like PyTorch's DistributedSampler: sampler.set_epoch(e); sampler.batches();
//
// Throws tapegrad::Error for batch_size or batches_per_bucket < 1, a negative length, or
// boundaries that are not positive and strictly increasing.
class BucketBatchSampler : public BatchSampler {
 public:
  explicit BucketBatchSampler(std::vector<int64_t> lengths, BucketBatchSamplerOptions options = {});

  int64_t size() const override { return num_batches_; }
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  // The epoch batches() uses without an argument.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<std::vector<int64_t>> batches() const { return batches(epoch_); }

  // The buckets (indices in length order), fixed for the sampler's life; one with bucketing off.
  const std::vector<std::vector<int64_t>>& buckets() const { return buckets_; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  const BucketBatchSamplerOptions& options() const { return options_; }

 private:
  std::vector<int64_t> lengths_;
  BucketBatchSamplerOptions options_;
  std::vector<std::vector<int64_t>> buckets_;
  int64_t num_batches_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace tapegrad
