// Reduction layout: reduced dims that are adjacent in a contiguous tensor need no copy; any
// other set is permuted to the end and copied once.
#include "ops/reduce_plan.h"

#include <algorithm>

namespace tapegrad::ops {

ReducePlan plan_reduction(const char* op, const Tensor& x, const Shape& dims, bool keepdim) {
  const int64_t ndim = x.dim();
  std::vector<bool> reduce(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(op, d, ndim);
    if (ndim == 0) continue;
    TG_CHECK(!reduce[w], op, ": dim ", w, " appears more than once in ", shape_str(dims));
    reduce[w] = true;
  }
  ReducePlan plan;
  for (int64_t d = 0; d < ndim; ++d) {
    plan.kept_shape.push_back(reduce[d] ? 1 : x.size(d));
    if (!reduce[d] || keepdim) plan.out_shape.push_back(reduce[d] ? 1 : x.size(d));
  }
  int64_t first = ndim, last = -1;
  for (int64_t d = 0; d < ndim; ++d)
    if (reduce[d]) {
      first = std::min(first, d);
      last = d;
    }
  bool adjacent = true;
  for (int64_t d = first; d <= last; ++d) adjacent = adjacent && reduce[d];
  Tensor input = x.detach();
  if (adjacent) {
    plan.input = input.contiguous();
    for (int64_t d = 0; d < ndim; ++d) {
      if (d < first)
        plan.outer *= x.size(d);
      else if (d <= last)
        plan.reduced *= x.size(d);
      else
        plan.inner *= x.size(d);
    }
    return plan;
  }
  Shape order;
  for (int64_t d = 0; d < ndim; ++d)
    if (!reduce[d]) {
      order.push_back(d);
      plan.outer *= x.size(d);
    }
  for (int64_t d = 0; d < ndim; ++d)
    if (reduce[d]) {
      order.push_back(d);
      plan.reduced *= x.size(d);
    }
  plan.input = input.permute(order).contiguous();
  return plan;
}

}  // namespace tapegrad::ops
