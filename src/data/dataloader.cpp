// DataLoader: epoch ordering (Fisher-Yates from a seeded Generator) and the one-slot prefetch worker.
#include "tapegrad/data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "tapegrad/core/device.h"
#include "tapegrad/core/generator.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {
namespace detail {

// One pass over the batches. With prefetch a worker builds batches into a one-slot queue; the
// destructor stops and joins it, so breaking out of a loop never leaves a thread behind.
class Epoch {
 public:
  Epoch(const Dataset& dataset, std::vector<std::vector<int64_t>> batches, bool prefetch, bool pin_memory)
      : dataset_(dataset), batches_(std::move(batches)), pin_memory_(pin_memory) {
    if (prefetch && !batches_.empty()) worker_ = std::thread([this] { work(); });
  }
  // Fetches the first batch; kept out of the constructor so a throw still runs ~Epoch and joins.
  void start() {
    if (!batches_.empty()) current_ = take();
  }
  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  bool done() const { return position_ >= int64_t(batches_.size()); }
  const Example& current() const { return current_; }
  void advance() {
    ++position_;
    if (!done()) current_ = take();
  }

 private:
  Example take() {
    if (!worker_.joinable()) return fetch(batches_[position_]);
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return slot_.has_value() || error_; });
    // A ready batch comes before an error, which belongs to a later batch.
    if (!slot_) std::rethrow_exception(error_);
    Example e = std::move(*slot_);
    slot_.reset();
    cv_.notify_all();
    return e;
  }
  void work() {
    for (const std::vector<int64_t>& indices : batches_) {
      Example e;
      try {
        e = fetch(indices);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !slot_.has_value() || stop_; });
      if (stop_) return;
      slot_ = std::move(e);
      cv_.notify_all();
    }
  }

  // One batch, in pinned memory when asked (pinning is the one extra copy PyTorch makes too).
  // Sequence lengths stay pageable: the LSTM reads them on the host.
  Example fetch(const std::vector<int64_t>& indices) const {
    Example e = dataset_.get_batch(indices);
    if (pin_memory_) {
      if (e.input.defined() && e.input.device().is_cpu()) e.input = e.input.pin_memory();
      if (e.target.defined() && e.target.device().is_cpu()) e.target = e.target.pin_memory();
    }
    return e;
  }

  const Dataset& dataset_;
  std::vector<std::vector<int64_t>> batches_;
  bool pin_memory_;
  int64_t position_ = 0;
  Example current_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<Example> slot_;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace detail

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options) : dataset_(dataset), options_(options) {
  TG_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be at least 1, got ", options_.batch_size);
  TG_CHECK(!options_.pin_memory || cuda::is_available(),
           "DataLoader: pin_memory = true needs a CUDA device, and none is available (cuda::device_count() == 0, ",
           "or this build has no CUDA backend); set pin_memory = false");
}

DataLoader::DataLoader(const Dataset& dataset, const BatchSampler& batch_sampler, DataLoaderOptions options)
    : DataLoader(dataset, options) {
  TG_CHECK(!options.shuffle && !options.drop_last, "DataLoader: a batch sampler decides the batches, so shuffle ",
           "and drop_last must be false (got shuffle = ", options.shuffle, ", drop_last = ", options.drop_last, ")");
  batch_sampler_ = &batch_sampler;
}

int64_t DataLoader::size() const {
  if (batch_sampler_) return batch_sampler_->size();
  int64_t n = dataset_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  if (batch_sampler_) {
    std::vector<int64_t> result;
    for (const std::vector<int64_t>& batch : batches(epoch)) result.insert(result.end(), batch.begin(), batch.end());
    return result;
  }
  int64_t n = dataset_.size();
  std::vector<int64_t> result(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) result[size_t(i)] = i;
  if (!options_.shuffle || n < 2) return result;
  // Fisher-Yates driven by one batch of uniform f64 draws, so the order depends only on seed + epoch.
  Generator generator(options_.seed + uint64_t(epoch));
  std::vector<double> u = rand({n}, kFloat64, &generator).tolist<double>();
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = std::min<int64_t>(i, int64_t(u[size_t(i)] * double(i + 1)));
    std::swap(result[size_t(i)], result[size_t(j)]);
  }
  return result;
}

std::vector<std::vector<int64_t>> DataLoader::batches(int64_t epoch) const {
  if (batch_sampler_) return batch_sampler_->batches(epoch);
  std::vector<int64_t> all = order(epoch);
  std::vector<std::vector<int64_t>> result;
  int64_t b = options_.batch_size;
  for (int64_t k = 0; k < size(); ++k) {
    auto first = all.begin() + k * b, last = all.begin() + std::min<int64_t>((k + 1) * b, int64_t(all.size()));
    result.emplace_back(first, last);
  }
  return result;
}

DataLoader::Iterator DataLoader::begin() {
  auto epoch = std::make_shared<detail::Epoch>(dataset_, batches(epoch_++), options_.prefetch, options_.pin_memory);
  epoch->start();
  return Iterator(epoch);
}

const Example& DataLoader::Iterator::operator*() const {
  TG_CHECK(!at_end(), "DataLoader::Iterator: dereferencing the end iterator");
  return epoch_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  TG_CHECK(!at_end(), "DataLoader::Iterator: advancing past the end");
  epoch_->advance();
  if (epoch_->done()) epoch_.reset();  // joins the (finished) worker now rather than later
  return *this;
}

bool DataLoader::Iterator::at_end() const {
  return !epoch_ || epoch_->done();
}

}  // namespace tapegrad
