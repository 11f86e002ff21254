// DistributedSampler: a seeded epoch permutation, padded or cut to a multiple of the ranks, strided.
#include "tapegrad/distributed/sampler.h"

#include <algorithm>

#include "tapegrad/core/error.h"
#include "tapegrad/core/generator.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::distributed {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  TG_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be >= 0, got ", dataset_size);
  TG_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  TG_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is outside [0, ", num_replicas, ")");
  // PyTorch's sizes: with drop_last, floor(n / N) each; otherwise ceil(n / N), padding the tail.
  num_samples_ = options_.drop_last_ ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const int64_t n = dataset_size_;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (options_.shuffle_ && n >= 2) {
    // The DataLoader's shuffle (src/data/dataloader.cpp): Fisher-Yates over one batch of uniform
    // f64 draws from Generator(seed + epoch), so one process reading the whole dataset with
    // DataLoader(shuffle, seed) sees the same permutation the ranks share out.
    Generator generator(options_.seed_ + uint64_t(epoch));
    std::vector<double> u = rand({n}, kFloat64, &generator).tolist<double>();
    for (int64_t i = n - 1; i > 0; --i) {
      int64_t j = std::min<int64_t>(i, int64_t(u[size_t(i)] * double(i + 1)));
      std::swap(order[size_t(i)], order[size_t(j)]);
    }
  }
  const int64_t total = total_size();
  if (total > n && n > 0) {
    // Pad with the first indices, repeated as often as needed (PyTorch's rule).
    for (int64_t i = n; i < total; ++i) order.push_back(order[size_t((i - n) % n)]);
  }
  order.resize(size_t(std::min<int64_t>(total, int64_t(order.size()))));
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = rank_; i < int64_t(order.size()); i += num_replicas_) mine.push_back(order[size_t(i)]);
  return mine;
}

std::vector<std::vector<int64_t>> DistributedSampler::batches(int64_t batch_size, bool drop_last) const {
  TG_CHECK(batch_size >= 1, "DistributedSampler::batches: batch_size must be at least 1, got ", batch_size);
  std::vector<int64_t> all = indices();
  std::vector<std::vector<int64_t>> out;
  for (size_t start = 0; start < all.size(); start += size_t(batch_size)) {
    size_t end = std::min(all.size(), start + size_t(batch_size));
    if (drop_last && int64_t(end - start) < batch_size) break;
    out.emplace_back(all.begin() + int64_t(start), all.begin() + int64_t(end));
  }
  return out;
}

}  // namespace tapegrad::distributed
