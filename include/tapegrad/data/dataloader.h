// DataLoader: iterates a Dataset in (optionally shuffled) batches, assembling the next batch on a
// background thread while the caller uses the current one.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "tapegrad/data/dataset.h"
#include "tapegrad/data/sampler.h"

namespace tapegrad {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  uint64_t seed = 0;       // epoch e is shuffled by Generator(seed + e)
  bool drop_last = false;  // drop a final batch smaller than batch_size
  bool prefetch = true;    // build batch k+1 on a worker thread; batches are identical either way
  // Put each batch's (CPU) tensors in pinned host memory, on the worker thread when prefetching,
  // so that batch.input.to(kCUDA) copies asynchronously. Needs a CUDA device: without one the
  // DataLoader constructor throws (rather than silently ignoring the option).
  bool pin_memory = false;
};

namespace detail {
class Epoch;
}

// Usage: for (const Example& batch : loader) { ... }  -- each begin() starts the next epoch.
// Batches are [B, ...] inputs and targets from Dataset::get_batch. The dataset must outlive every
// iterator. Leaving the loop early stops and joins the worker when the iterator is destroyed; an
// exception thrown while building a batch is rethrown in the caller when that batch is reached.
// Throws tapegrad::Error for batch_size < 1, and for pin_memory without a CUDA device.
//
// With a BatchSampler (PyTorch's DataLoader(dataset, batch_sampler=...)), epoch e's batches are
// batch_sampler.batches(e), each built by one dataset.get_batch(indices); batch_size is then
// unused, and shuffle and drop_last must stay false (the sampler decides both; PyTorch rejects
// them too). The sampler, like the dataset, must outlive the loader and its iterators.
class DataLoader {
 public:
  explicit DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(const Dataset& dataset, const BatchSampler& batch_sampler, DataLoaderOptions options = {});

  // A single-pass input iterator; copies share one position.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = const Example*;
    using reference = const Example&;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<detail::Epoch> epoch) : epoch_(std::move(epoch)) {}
    const Example& operator*() const;
    const Example* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    bool at_end() const;
    std::shared_ptr<detail::Epoch> epoch_;
  };

  Iterator begin();  // starts epoch epoch() and then increments it
  Iterator end() { return Iterator(); }
  int64_t size() const;  // batches per epoch
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }  // to resume a run reproducibly
  // The example order epoch `epoch` uses (identity without shuffle; the batches concatenated with
  // a batch sampler).
  std::vector<int64_t> order(int64_t epoch) const;
  // The index lists of epoch `epoch`'s batches, in the order the loader yields them.
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const;

 private:
  const Dataset& dataset_;
  const BatchSampler* batch_sampler_ = nullptr;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace tapegrad
