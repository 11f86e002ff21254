// embedding with padding_idx and max_norm. The lookup is the index_select of indexing.cpp; the
// padded form records its own node so the padding row's gradient is never formed, and the
// renormalisation is a no-grad, in-place rescale of the named rows.
#include "tapegrad/ops/embedding.h"

#include <cmath>
#include <set>

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

using namespace ops;

namespace {

void check_weight(const Tensor& weight) {
  check_defined("embedding", weight, "weight");
  TG_CHECK(weight.dim() == 2, "embedding: weight must be [num_embeddings, embedding_dim], got ",
           shape_str(weight.sizes()));
}

// The indices as int64 host values, each checked against [0, rows).
std::vector<int64_t> host_indices(const Tensor& indices, int64_t rows) {
  check_defined("embedding", indices, "indices");
  TG_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding: indices must be int64 or int32, got ",
           indices.dtype());
  std::vector<int64_t> values = indices.detach().to(kInt64).contiguous().cpu().tolist<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    TG_CHECK(values[i] >= 0 && values[i] < rows, "embedding: index ", values[i], " at position ", i,
             " is out of range for ", rows, " embeddings");
  return values;
}

}  // namespace

Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  check_weight(weight);
  check_floating("embedding_renorm_", weight);
  TG_CHECK(max_norm >= 0, "embedding_renorm_: max_norm must be >= 0, got ", max_norm);
  TG_CHECK(norm_type > 0, "embedding_renorm_: norm_type must be positive (or infinity), got ", norm_type);
  std::vector<int64_t> picked = host_indices(indices, weight.size(0));
  std::set<int64_t> distinct(picked.begin(), picked.end());  // sorted, like PyTorch's CPU kernel
  if (distinct.empty()) return weight;
  autograd::NoGradGuard no_grad;
  Tensor rows = index_select(
      weight, 0, tensor<int64_t>(std::vector<int64_t>(distinct.begin(), distinct.end())).to(weight.device()));
  Tensor norms;
  if (std::isinf(norm_type))
    norms = max(abs(rows), 1).values;
  else
    norms = pow(sum(pow(abs(rows), norm_type), Shape{1}), 1.0 / norm_type);
  std::vector<double> host_norms = norms.to(kFloat64).cpu().tolist<double>();
  size_t k = 0;
  for (int64_t row : distinct) {
    const double norm = host_norms[k++];
    if (norm > max_norm) {
      Tensor r = weight.select(0, row);
      r.mul_(max_norm / (norm + 1e-7));
    }
  }
  return weight;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type) {
  check_weight(weight);
  const int64_t rows = weight.size(0);
  if (padding_idx) {
    TG_CHECK(*padding_idx >= -rows && *padding_idx < rows, "embedding: padding_idx ", *padding_idx,
             " must be within num_embeddings (", rows, ")");
    if (*padding_idx < 0) *padding_idx += rows;
  }
  if (max_norm) {
    Tensor w = weight;
    embedding_renorm_(w, indices, *max_norm, norm_type);
  }
  if (!padding_idx) return embedding(weight, indices);

  Tensor out = embedding(weight.detach(), indices);  // checks the indices
  if (any_requires_grad({weight})) {
    const Shape weight_shape = weight.sizes();
    const int64_t pad = *padding_idx;
    SavedTensor flat = cast(indices.detach(), kInt64).contiguous().reshape({-1});
    record("embedding", {weight}, {out}, [=](const std::vector<Tensor>& g) {
      // Like index_select's backward (rows add up), then the padding row is cleared: PyTorch
      // skips the padding index when it accumulates.
      Tensor grad = zeros(weight_shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      Tensor g2 = g[0].reshape({-1, weight_shape[1]}).contiguous();
      if (g2.numel() > 0) TG_KERNEL(grad.device(), index_add)(grad, 0, flat.get(), g2, backend::DeviceCheck::None);
      grad.select(0, pad).zero_();
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

}  // namespace tapegrad
