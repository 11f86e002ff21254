// TextDataset: encoded records served as single sequences or collated language-model batches.
#include <numeric>

#include "tapegrad/core/error.h"
#include "tapegrad/data/text.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {

TextDataset::TextDataset(std::vector<std::vector<int64_t>> records, LMCollateOptions collate)
    : records_(std::move(records)), collate_(collate) {
  for (size_t i = 0; i < records_.size(); ++i)
    TG_CHECK(records_[i].size() >= 2, "TextDataset: record ", i, " has ", records_[i].size(),
             " ids; next-token prediction needs at least 2");
}

const std::vector<int64_t>& TextDataset::record(int64_t index) const {
  TG_CHECK(index >= 0 && index < size(), "TextDataset: index ", index, " out of range for a dataset of size ", size());
  return records_[size_t(index)];
}

Example TextDataset::get(int64_t index) const {
  const std::vector<int64_t>& r = record(index);
  int64_t n = int64_t(r.size()) - 1;
  Example e;
  e.input = tensor<int64_t>(std::vector<int64_t>(r.begin(), r.end() - 1));
  e.target = tensor<int64_t>(std::vector<int64_t>(r.begin() + 1, r.end()));
  e.lengths = scalar_tensor(double(n), TensorOptions(kInt64));
  return e;
}

Example TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  TG_CHECK(!indices.empty(), "TextDataset::get_batch: empty index list");
  std::vector<const std::vector<int64_t>*> batch;
  batch.reserve(indices.size());
  for (int64_t i : indices) batch.push_back(&record(i));
  return collate_lm(batch, collate_);
}

std::vector<int64_t> TextDataset::lengths() const {
  std::vector<int64_t> result;
  result.reserve(records_.size());
  for (const auto& r : records_) result.push_back(int64_t(r.size()) - 1);
  return result;
}

int64_t TextDataset::num_tokens() const {
  int64_t n = 0;
  for (const auto& r : records_) n += int64_t(r.size());
  return n;
}

}  // namespace tapegrad
