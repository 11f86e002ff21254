// Embedding: a lookup table of num_embeddings vectors of size embedding_dim, PyTorch's
// nn.Embedding (without scale_grad_by_freq and sparse).
#pragma once

#include <optional>

#include "tapegrad/core/generator.h"
#include "tapegrad/nn/module.h"

namespace tapegrad::nn {

// forward(indices): int64/int32 indices of any shape -> [..., embedding_dim], see
// tapegrad::embedding in tapegrad/ops/embedding.h for padding_idx and max_norm.
//   weight [num_embeddings, embedding_dim] starts N(0, 1) (drawn from `generator`, default
//   default_generator()), with the padding_idx row zeroed. padding_idx may be negative (counted
//   from the end, stored normalised); the padding row never receives a gradient.
//   max_norm: each forward first rescales, in place and without gradient, the looked-up rows whose
//   norm_type-norm exceeds max_norm down to max_norm.
// Throws tapegrad::Error for non-positive sizes, a padding_idx outside [-num_embeddings,
// num_embeddings), and (in forward) for non-integer or out-of-range indices.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            std::optional<double> max_norm = std::nullopt, double norm_type = 2.0, Generator* generator = nullptr);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  std::optional<double> max_norm() const { return max_norm_; }
  double norm_type() const { return norm_type_; }
  Tensor weight;

 protected:
  std::string extra_repr() const override;

 private:
  int64_t num_embeddings_, embedding_dim_;
  std::optional<int64_t> padding_idx_;
  std::optional<double> max_norm_;
  double norm_type_;
};

}  // namespace tapegrad::nn
