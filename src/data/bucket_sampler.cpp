// BucketBatchSampler: fixed length-sorted buckets, reshuffled within and across each epoch.
#include <algorithm>
#include <numeric>

#include "tapegrad/core/error.h"
#include "tapegrad/core/generator.h"
#include "tapegrad/data/sampler.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {
namespace {

// Fisher-Yates over uniform f64 draws from `generator`, as the DataLoader shuffles.
template <class T>
void shuffle_with(std::vector<T>& items, Generator& generator) {
  int64_t n = int64_t(items.size());
  if (n < 2) return;
  std::vector<double> u = rand({n}, kFloat64, &generator).tolist<double>();
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = std::min<int64_t>(i, int64_t(u[size_t(i)] * double(i + 1)));
    std::swap(items[size_t(i)], items[size_t(j)]);
  }
}

int64_t batches_in(int64_t n, int64_t b, bool drop_last) {
  return drop_last ? n / b : (n + b - 1) / b;
}

}  // namespace

BucketBatchSampler::BucketBatchSampler(std::vector<int64_t> lengths, BucketBatchSamplerOptions options)
    : lengths_(std::move(lengths)), options_(std::move(options)) {
  const auto& o = options_;
  TG_CHECK(o.batch_size >= 1, "BucketBatchSampler: batch_size must be at least 1, got ", o.batch_size);
  TG_CHECK(o.batches_per_bucket >= 1, "BucketBatchSampler: batches_per_bucket must be at least 1, got ",
           o.batches_per_bucket);
  for (size_t i = 0; i < lengths_.size(); ++i)
    TG_CHECK(lengths_[i] >= 0, "BucketBatchSampler: length ", lengths_[i], " of sequence ", i, " is negative");
  for (size_t k = 0; k < o.boundaries.size(); ++k)
    TG_CHECK(o.boundaries[k] > (k == 0 ? 0 : o.boundaries[k - 1]), "BucketBatchSampler: boundaries must be ",
             "positive and strictly increasing, got ", o.boundaries[k], " at position ", k);

  int64_t n = int64_t(lengths_.size());
  std::vector<int64_t> sorted(size_t(n), 0);
  std::iota(sorted.begin(), sorted.end(), int64_t(0));
  if (!o.bucketing) {
    if (n > 0) buckets_.push_back(sorted);
  } else {
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](int64_t a, int64_t b) { return lengths_[size_t(a)] < lengths_[size_t(b)]; });
    if (o.boundaries.empty()) {
      int64_t span = o.batch_size * o.batches_per_bucket;
      for (int64_t start = 0; start < n; start += span)
        buckets_.emplace_back(sorted.begin() + start, sorted.begin() + std::min(n, start + span));
    } else {
      size_t next = 0;  // the first boundary above the current bucket's lengths
      for (int64_t i : sorted) {
        int64_t len = lengths_[size_t(i)];
        bool opens = buckets_.empty();
        while (next < o.boundaries.size() && len >= o.boundaries[next]) ++next, opens = true;
        if (opens) buckets_.emplace_back();
        buckets_.back().push_back(i);
      }
    }
  }
  for (const auto& bucket : buckets_) num_batches_ += batches_in(int64_t(bucket.size()), o.batch_size, o.drop_last);
}

std::vector<std::vector<int64_t>> BucketBatchSampler::batches(int64_t epoch) const {
  const auto& o = options_;
  Generator generator(o.seed + uint64_t(epoch));
  std::vector<std::vector<int64_t>> result;
  result.reserve(size_t(num_batches_));
  for (std::vector<int64_t> bucket : buckets_) {
    if (o.shuffle) shuffle_with(bucket, generator);
    int64_t m = int64_t(bucket.size());
    for (int64_t k = 0; k < batches_in(m, o.batch_size, o.drop_last); ++k)
      result.emplace_back(bucket.begin() + k * o.batch_size, bucket.begin() + std::min(m, (k + 1) * o.batch_size));
  }
  if (o.shuffle) shuffle_with(result, generator);
  return result;
}

}  // namespace tapegrad
