// sum, mean and var. The gradient of a sum is the output gradient broadcast back over the
// reduced dims; mean scales it by 1/count; var is composed from mean and sum.
#include "amp/policy.h"
#include "ops/op_helpers.h"
#include "ops/reduce_plan.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

using namespace ops;
using backend::ReduceOp;

namespace {

Tensor sum_or_mean(ReduceOp op, const char* name, const Tensor& x, const Shape& dims, bool keepdim) {
  const amp::AutocastOp autocast_op = op == ReduceOp::Mean ? amp::AutocastOp::mean : amp::AutocastOp::sum;
  if (auto f = amp::autocast_inputs(autocast_op, {&x}).float32) return sum_or_mean(op, name, (*f)[0], dims, keepdim);
  check_defined(name, x);
  TG_CHECK(op != ReduceOp::Mean || x.is_floating_point(), name, ": expected a floating-point input, got ", x.dtype(),
           " (convert with .to(kFloat32))");
  ReducePlan plan = plan_reduction(name, x, dims, keepdim);
  DType out_dtype = x.is_floating_point() ? x.dtype() : kInt64;
  Tensor out = empty_tensor(plan.out_shape, out_dtype, x.device());
  if (out.numel() > 0) {
    if (plan.reduced == 0) {
      TG_KERNEL(x.device(), fill)(out, op == ReduceOp::Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    } else {
      TG_KERNEL(x.device(), reduce)(op, plan.input, out, plan.outer, plan.reduced, plan.inner);
    }
  }
  if (any_requires_grad({x})) {
    Shape x_shape = x.sizes(), kept = plan.kept_shape;
    double scale = op == ReduceOp::Mean ? 1.0 / static_cast<double>(plan.reduced) : 1.0;
    record(name, {x}, {out}, [x_shape, kept, scale](const std::vector<Tensor>& g) {
      Tensor grad = g[0].reshape(kept).expand(x_shape);
      return std::vector<Tensor>{scale == 1.0 ? grad : mul(grad, scale)};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) {
  return sum_or_mean(ReduceOp::Sum, "sum", x, {}, false);
}
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_or_mean(ReduceOp::Sum, "sum", x, dims, keepdim);
}
Tensor mean(const Tensor& x) {
  return sum_or_mean(ReduceOp::Mean, "mean", x, {}, false);
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_or_mean(ReduceOp::Mean, "mean", x, dims, keepdim);
}

Tensor var(const Tensor& x, double correction) {
  return var(x, {}, correction, false);
}

Tensor var(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::var, {&x}).float32) return var((*f)[0], dims, correction, keepdim);
  check_defined("var", x);
  TG_CHECK(x.is_floating_point(), "var: expected a floating-point input, got ", x.dtype());
  ReducePlan plan = plan_reduction("var", x, dims, keepdim);  // validates dims
  Tensor centred = sub(x, mean(x, dims, true));
  double denominator = std::max(0.0, static_cast<double>(plan.reduced) - correction);
  return div(sum(mul(centred, centred), dims, keepdim), denominator);
}

}  // namespace tapegrad
