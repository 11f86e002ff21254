// Embedding: parameter set-up and PyTorch's repr; the lookup is tapegrad::embedding.
#include "tapegrad/nn/embedding.h"

#include <cmath>

#include "nn/format.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/embedding.h"

namespace tapegrad::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
                     std::optional<double> max_norm, double norm_type, Generator* generator)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim), max_norm_(max_norm), norm_type_(norm_type) {
  TG_CHECK(num_embeddings > 0 && embedding_dim > 0,
           "Embedding: num_embeddings and embedding_dim must be positive, got ", num_embeddings, " and ",
           embedding_dim);
  if (padding_idx) {
    TG_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings, "Embedding: padding_idx ", *padding_idx,
             " must be within num_embeddings (", num_embeddings, ")");
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  TG_CHECK(!max_norm || *max_norm >= 0, "Embedding: max_norm must be >= 0, got ", max_norm.value_or(0));
  TG_CHECK(norm_type > 0, "Embedding: norm_type must be positive (or infinity), got ", norm_type);
  Tensor w = empty({num_embeddings, embedding_dim});
  normal_(w, 0.0, 1.0, generator);
  if (padding_idx_) w.select(0, *padding_idx_).zero_();  // PyTorch's reset_parameters
  weight = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices, padding_idx_, max_norm_, norm_type_);
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings_) + ", " + std::to_string(embedding_dim_);
  if (padding_idx_) s += ", padding_idx=" + std::to_string(*padding_idx_);
  if (max_norm_) s += ", max_norm=" + format_double(*max_norm_);
  if (norm_type_ != 2) s += ", norm_type=" + format_double(norm_type_);
  return s;
}

}  // namespace tapegrad::nn
