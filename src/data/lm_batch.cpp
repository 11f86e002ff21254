// Language-model batches: collate (pad, shift, lengths), padding counts and truncated-BPTT chunks.
#include "tapegrad/data/lm_batch.h"

#include <algorithm>

#include "tapegrad/core/error.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {

Example collate_lm(const std::vector<std::vector<int64_t>>& sequences, const LMCollateOptions& options) {
  std::vector<const std::vector<int64_t>*> pointers;
  pointers.reserve(sequences.size());
  for (const auto& s : sequences) pointers.push_back(&s);
  return collate_lm(pointers, options);
}

Example collate_lm(const std::vector<const std::vector<int64_t>*>& sequences, const LMCollateOptions& options) {
  TG_CHECK(!sequences.empty(), "collate_lm: empty batch");
  int64_t batch = int64_t(sequences.size()), steps = 0;
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int64_t>* s = sequences[size_t(b)];
    TG_CHECK(s != nullptr, "collate_lm: sequence ", b, " is null");
    TG_CHECK(s->size() >= 2, "collate_lm: sequence ", b, " has ", s->size(),
             " tokens; next-token prediction needs at least 2");
    lengths.push_back(int64_t(s->size()) - 1);
    steps = std::max(steps, lengths.back());
  }
  std::vector<int64_t> input(size_t(steps * batch), options.pad_id),
      target(size_t(steps * batch), options.ignore_index);
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int64_t>& s = *sequences[size_t(b)];
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t) {
      size_t at = size_t(options.batch_first ? b * steps + t : t * batch + b);
      input[at] = s[size_t(t)];
      target[at] = s[size_t(t) + 1];
    }
  }
  Shape shape = options.batch_first ? Shape{batch, steps} : Shape{steps, batch};
  Example e;
  e.input = tensor<int64_t>(input, shape);
  e.target = tensor<int64_t>(target, shape);
  e.lengths = tensor<int64_t>(lengths);
  return e;
}

PaddingStats padding_stats(const Example& batch) {
  TG_CHECK(batch.input.defined() && batch.input.dim() == 2, "padding_stats: input must be a 2-D batch, got ",
           batch.input.defined() ? shape_str(batch.input.sizes()) : "an undefined tensor");
  TG_CHECK(batch.lengths.defined(), "padding_stats: the batch has no lengths (not from collate_lm?)");
  PaddingStats stats;
  for (int64_t l : batch.lengths.to(kCPU).tolist<int64_t>()) stats.real += l;
  stats.padded = batch.input.numel() - stats.real;
  return stats;
}

std::vector<Example> split_bptt(const Example& batch, int64_t bptt, bool batch_first) {
  TG_CHECK(bptt >= 1, "split_bptt: bptt must be at least 1, got ", bptt);
  const Tensor &input = batch.input, &target = batch.target;
  TG_CHECK(input.defined() && target.defined() && input.dim() == 2 && input.sizes() == target.sizes(),
           "split_bptt: input and target must be 2-D of one shape, got ",
           input.defined() ? shape_str(input.sizes()) : "undefined", " and ",
           target.defined() ? shape_str(target.sizes()) : "undefined");
  int64_t time_dim = batch_first ? 1 : 0;
  int64_t steps = input.size(time_dim), size_b = input.size(1 - time_dim);
  TG_CHECK(batch.lengths.defined() && batch.lengths.dtype() == kInt64 && batch.lengths.dim() == 1 &&
               batch.lengths.size(0) == size_b,
           "split_bptt: lengths must be int64 [", size_b, "] for an input of shape ", shape_str(input.sizes()),
           batch_first ? " (batch_first)" : " (time-major)");
  std::vector<int64_t> lengths = batch.lengths.to(kCPU).tolist<int64_t>();
  for (int64_t l : lengths) TG_CHECK(l >= 0 && l <= steps, "split_bptt: length ", l, " is outside [0, ", steps, "]");

  std::vector<Example> chunks;
  for (int64_t start = 0; start < steps; start += bptt) {
    int64_t len = std::min(bptt, steps - start);
    Example c;
    c.input = input.narrow(time_dim, start, len).contiguous();
    c.target = target.narrow(time_dim, start, len).contiguous();
    std::vector<int64_t> chunk_lengths;
    for (int64_t l : lengths) chunk_lengths.push_back(std::clamp<int64_t>(l - start, 0, len));
    c.lengths = tensor<int64_t>(chunk_lengths);
    chunks.push_back(std::move(c));
  }
  return chunks;
}

}  // namespace tapegrad
