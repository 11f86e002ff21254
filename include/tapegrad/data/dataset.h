// Datasets: indexable (input, target) collections, an in-memory TensorDataset and FashionMNIST.
// Text corpora for language models are in tapegrad/data/text.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

struct Example {
  Tensor input;
  Tensor target;
  // Variable-length sequences only (e.g. TextDataset, collate_lm): int64 [B] on the CPU, the
  // number of real timesteps of each sequence. Undefined for fixed-size examples.
  Tensor lengths{};
};

// An indexable collection of examples. get() and get_batch() must be safe to call from another
// thread (the DataLoader's prefetch worker) while the caller reads earlier results.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // One example; throws tapegrad::Error if index is outside [0, size()).
  virtual Example get(int64_t index) const = 0;
  // Examples stacked along a new dim 0. The default stacks get(); throws on an empty list.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Examples are rows (dim 0) of `inputs` and `targets`, which must agree in size(0).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;  // index_select, one copy
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
};

// Fashion-MNIST from `root`: train-* (60000) or t10k-* (10000) idx .gz files.
// images(): float32 [N, 784] in [0, 1], or (x - 0.2860) / 0.3530 with normalize; labels(): int64 [N]
// in 0..9. Throws if the files are missing or malformed or the image and label counts differ.
class FashionMNIST : public TensorDataset {
 public:
  explicit FashionMNIST(std::string root = "/usr/share/datasets/fashion-mnist", bool train = true,
                        bool normalize = false);
  const Tensor& images() const { return inputs(); }
  const Tensor& labels() const { return targets(); }

 private:
  explicit FashionMNIST(std::pair<Tensor, Tensor> data);
};

}  // namespace tapegrad
