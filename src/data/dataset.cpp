// Dataset's default batching and the in-memory TensorDataset.
#include "tapegrad/data/dataset.h"

#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/indexing.h"
#include "tapegrad/ops/join.h"

namespace tapegrad {

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  TG_CHECK(!indices.empty(), "Dataset::get_batch: empty index list");
  std::vector<Tensor> inputs, targets;
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return {stack(inputs), stack(targets)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  TG_CHECK(inputs_.defined() && targets_.defined(), "TensorDataset: inputs and targets must be defined");
  TG_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1, "TensorDataset: inputs and targets need at least one dim");
  TG_CHECK(inputs_.size(0) == targets_.size(0), "TensorDataset: inputs have ", inputs_.size(0),
           " rows but targets have ", targets_.size(0));
}

Example TensorDataset::get(int64_t index) const {
  TG_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index, " out of range for a dataset of size ",
           size());
  return {inputs_[index], targets_[index]};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  TG_CHECK(!indices.empty(), "TensorDataset::get_batch: empty index list");
  Tensor index = tensor<int64_t>(indices);
  return {index_select(inputs_, 0, index), index_select(targets_, 0, index)};
}

}  // namespace tapegrad
