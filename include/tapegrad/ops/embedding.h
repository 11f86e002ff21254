// Embedding lookup with PyTorch's padding_idx and max_norm (torch.nn.functional.embedding). The
// plain two-argument lookup, embedding(weight, indices), is in tapegrad/ops/indexing.h.
#pragma once

#include <optional>

#include "tapegrad/core/tensor.h"
#include "tapegrad/ops/indexing.h"

namespace tapegrad {

// weight [num_embeddings, embedding_dim] looked up by int64/int32 `indices` of any shape ->
// [..., embedding_dim]; differentiable in weight (rows picked several times accumulate).
// padding_idx (negative counts from the end): rows looked up at that index come out as they are,
// but the weight row gets no gradient from them. max_norm: before the lookup, every row that
// `indices` names whose norm_type-norm exceeds max_norm is rescaled in place, under no grad, to
// norm max_norm (embedding_renorm_ below). Throws tapegrad::Error for non-integer indices, an index
// outside [0, num_embeddings), a padding_idx outside [-num_embeddings, num_embeddings), or a bad
// max_norm/norm_type.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);

// PyTorch's torch.embedding_renorm_: each distinct row i named by `indices` whose norm
// ||weight[i]||_p (p = norm_type > 0, or infinity) exceeds max_norm (>= 0) is multiplied by
// max_norm / (norm + 1e-7). Modifies weight in place without recording a gradient; one small op
// per rescaled row. Returns weight.
Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type = 2.0);

}  // namespace tapegrad
