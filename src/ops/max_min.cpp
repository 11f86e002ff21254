// max/min (overall, and along a dim with indices), argmax/argmin. The gradient goes to the
// position the index names (the first extreme), like PyTorch's dim-wise max.
#include "ops/op_helpers.h"
#include "ops/reduce_plan.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/indexing.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

using namespace ops;
using backend::ReduceOp;

namespace {

ValuesIndices extreme(ReduceOp op, const char* name, const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(name, x);
  TG_CHECK(x.dtype() != kBool, name, ": not defined for bool tensors");
  ReducePlan plan = plan_reduction(name, x, dims, keepdim);
  TG_CHECK(plan.reduced > 0, name, ": cannot reduce over a dim of size 0 (shape ", shape_str(x.sizes()), ")");
  Tensor values = empty_tensor(plan.out_shape, x.dtype(), x.device());
  Tensor indices = empty_tensor(plan.out_shape, kInt64, x.device());
  if (values.numel() > 0)
    TG_KERNEL(x.device(), reduce_with_index)(op, plan.input, values, indices, plan.outer, plan.reduced, plan.inner);
  return {values, indices};
}

}  // namespace

namespace {

// Values and indices along `dim`, recording a backward that sends each gradient to the index.
ValuesIndices extreme_along(ReduceOp op, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  ValuesIndices r = extreme(op, name, x, {dim}, keepdim);
  if (any_requires_grad({x})) {
    Shape x_shape = x.sizes();
    int64_t d = x.dim() ? wrap_dim(name, dim, x.dim()) : 0;
    Shape kept = x_shape;
    if (!kept.empty()) kept[d] = 1;
    SavedTensor idx = r.indices;
    record(name, {x}, {r.values}, [=](const std::vector<Tensor>& g) {
      if (x_shape.empty()) return std::vector<Tensor>{g[0]};
      Tensor zero = zeros(x_shape, TensorOptions(g[0].dtype()).device(g[0].device()));
      return std::vector<Tensor>{scatter_add(zero, d, idx.get().reshape(kept), g[0].reshape(kept))};
    });
  }
  return r;
}

}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along(ReduceOp::Max, "max", x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along(ReduceOp::Min, "min", x, dim, keepdim);
}

Tensor max(const Tensor& x) {
  check_defined("max", x);
  TG_CHECK(x.numel() > 0, "max: the input is empty (shape ", shape_str(x.sizes()), ")");
  return max(x.reshape({-1}), 0, false).values;
}

Tensor min(const Tensor& x) {
  check_defined("min", x);
  TG_CHECK(x.numel() > 0, "min: the input is empty (shape ", shape_str(x.sizes()), ")");
  return min(x.reshape({-1}), 0, false).values;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(ReduceOp::Max, "argmax", x, {dim}, keepdim).indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(ReduceOp::Min, "argmin", x, {dim}, keepdim).indices;
}
Tensor argmax(const Tensor& x) {
  check_defined("argmax", x);
  return extreme(ReduceOp::Max, "argmax", x.detach().reshape({-1}), {0}, false).indices;
}

}  // namespace tapegrad
