// index_select, index_add, gather, scatter_add and embedding. Indices are range-checked here on the
// host for CPU tensors (and for CUDA ones with cuda::sync_checks()); otherwise the CUDA kernel
// checks them without waiting and the Error comes at the next synchronisation (Note [deferred
// checks]). Each backward is the opposite move (select <-> add, gather <-> scatter).
#include "tapegrad/ops/indexing.h"

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {

using namespace ops;
using backend::DeviceCheck;

namespace {

// Returns the index as contiguous int64, after checking every value lies in [0, extent) when the
// check runs on the host (a synchronising read on CUDA, so only with sync checks on).
Tensor checked_index(const char* op, const Tensor& index, int64_t extent) {
  check_defined(op, index, "index");
  TG_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": index must be int64 or int32, got ",
           index.dtype());
  Tensor idx = cast(index.detach(), kInt64).contiguous();
  if (!backend::checks_on_host(idx.device().is_cuda())) return idx;
  std::vector<int64_t> values = idx.tolist<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    TG_CHECK(values[i] >= 0 && values[i] < extent, op, ": index ", values[i], " at position ", i,
             " is out of range for a dim of size ", extent);
  return idx;
}

// What the kernel reports a bad index as: nothing when checked_index checked it already.
DeviceCheck kernel_check(const Tensor& idx, DeviceCheck check) {
  return backend::checks_on_host(idx.device().is_cuda()) ? DeviceCheck::None : check;
}

Tensor select_rows(const char* op, DeviceCheck check, const Tensor& x, int64_t dim, const Tensor& index);

// For gather/scatter: index must have x's rank and x's sizes outside `dim`.
void check_index_shape(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const char* what) {
  TG_CHECK(index.dim() == x.dim(), op, ": index ", shape_str(index.sizes()), " must have as many dims as the ", what,
           " ", shape_str(x.sizes()));
  for (int64_t d = 0; d < x.dim(); ++d)
    TG_CHECK(d == dim || index.size(d) == x.size(d), op, ": index ", shape_str(index.sizes()), " and ", what, " ",
             shape_str(x.sizes()), " differ in dim ", d, " (only dim ", dim, " may differ)");
}

}  // namespace

namespace {

// index_select, its errors named `op` (embedding is one).
Tensor select_rows(const char* op, DeviceCheck check, const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined(op, x);
  TG_CHECK(x.dim() >= 1, op, ": expected at least 1 dim, got a 0-dim tensor");
  int64_t d = wrap_dim(op, dim, x.dim());
  TG_CHECK(index.defined() && index.dim() <= 1, op, ": index must be 1-D");
  check_same_device(op, x, index);
  Tensor idx = checked_index(op, index, x.size(d)).reshape({-1});
  Shape shape = x.sizes();
  shape[d] = idx.numel();
  Tensor out = empty_tensor(shape, x.dtype(), x.device());
  if (out.numel() > 0)
    TG_KERNEL(x.device(), index_select)(x.detach().contiguous(), d, idx, out, kernel_check(idx, check));
  if (any_requires_grad({x})) {
    Shape x_shape = x.sizes();
    SavedTensor saved = idx;
    record("index_select", {x}, {out}, [=](const std::vector<Tensor>& g) {
      Tensor grad = zeros(x_shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      if (g[0].numel() > 0)
        TG_KERNEL(grad.device(), index_add)(grad, d, saved.get(), g[0].contiguous(), DeviceCheck::None);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return select_rows("index_select", DeviceCheck::IndexSelect, x, dim, index);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("index_add", x);
  check_defined("index_add", src, "source");
  TG_CHECK(x.dim() >= 1, "index_add: expected at least 1 dim, got a 0-dim tensor");
  int64_t d = wrap_dim("index_add", dim, x.dim());
  check_same_device("index_add", x, src);
  TG_CHECK(x.dtype() == src.dtype(), "index_add: source dtype ", src.dtype(), " differs from ", x.dtype());
  TG_CHECK(index.defined() && index.dim() <= 1, "index_add: index must be 1-D");
  Tensor idx = checked_index("index_add", index, x.size(d)).reshape({-1});
  Shape expected = x.sizes();
  expected[d] = idx.numel();
  TG_CHECK(src.sizes() == expected, "index_add: source of shape ", shape_str(src.sizes()), " should be ",
           shape_str(expected));
  Tensor out = x.detach().clone();
  if (src.numel() > 0)
    TG_KERNEL(x.device(), index_add)(out, d, idx, src.detach().contiguous(), kernel_check(idx, DeviceCheck::IndexAdd));
  if (any_requires_grad({x, src})) {
    SavedTensor saved = idx;
    record("index_add", {x, src}, {out}, [=](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0], index_select(g[0], d, saved.get())};
    });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("gather", x);
  check_defined("gather", index, "index");
  check_same_device("gather", x, index);
  int64_t d = wrap_dim("gather", dim, x.dim());
  check_index_shape("gather", x, d, index, "input");
  Tensor idx = checked_index("gather", index, x.dim() ? x.size(d) : 1);
  Tensor out = empty_tensor(index.sizes(), x.dtype(), x.device());
  if (out.numel() > 0)
    TG_KERNEL(x.device(), gather)(x.detach().contiguous(), d, idx, out, kernel_check(idx, DeviceCheck::Gather));
  if (any_requires_grad({x})) {
    Shape x_shape = x.sizes();
    SavedTensor saved = idx;
    record("gather", {x}, {out}, [=](const std::vector<Tensor>& g) {
      Tensor grad = zeros(x_shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      if (g[0].numel() > 0)
        TG_KERNEL(grad.device(), scatter_add)(grad, d, saved.get(), g[0].contiguous(), DeviceCheck::None);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("scatter_add", x);
  check_defined("scatter_add", src, "source");
  check_defined("scatter_add", index, "index");
  check_same_device("scatter_add", x, src);
  check_same_device("scatter_add", x, index);
  TG_CHECK(x.dtype() == src.dtype(), "scatter_add: source dtype ", src.dtype(), " differs from ", x.dtype());
  int64_t d = wrap_dim("scatter_add", dim, x.dim());
  check_index_shape("scatter_add", x, d, index, "input");
  TG_CHECK(src.sizes() == index.sizes(), "scatter_add: source ", shape_str(src.sizes()), " and index ",
           shape_str(index.sizes()), " must have the same shape");
  Tensor idx = checked_index("scatter_add", index, x.dim() ? x.size(d) : 1);
  Tensor out = x.detach().clone();
  if (src.numel() > 0) {
    auto scatter = TG_KERNEL(x.device(), scatter_add);
    scatter(out, d, idx, src.detach().contiguous(), kernel_check(idx, DeviceCheck::ScatterAdd));
  }
  if (any_requires_grad({x, src})) {
    SavedTensor saved = idx;
    record("scatter_add", {x, src}, {out}, [=](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{g[0], gather(g[0], d, saved.get())};
    });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_defined("embedding", weight, "weight");
  check_defined("embedding", indices, "indices");
  TG_CHECK(weight.dim() == 2, "embedding: weight must be [num_embeddings, embedding_dim], got ",
           shape_str(weight.sizes()));
  TG_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "embedding: index must be int64 or int32, got ",
           indices.dtype());
  Shape shape = indices.sizes();
  shape.push_back(weight.size(1));
  return select_rows("embedding", DeviceCheck::Embedding, weight, 0, indices.reshape({-1})).reshape(shape);
}

}  // namespace tapegrad
