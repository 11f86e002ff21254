// Checks and reduction shared by the elementwise losses.
#include "ops/elementwise_loss.h"

#include "ops/op_helpers.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad::ops {

void check_elementwise_loss(const char* op, const Tensor& input, const Tensor& target) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  check_floating(op, input);
  TG_CHECK(target.is_floating_point(), op, ": target must be floating point, got ", target.dtype());
  // PyTorch broadcasts a mismatched target with a warning; a mismatch is almost always a bug
  // (e.g. [N] against [N, 1] silently becomes [N, N]), so it is an error here.
  TG_CHECK(input.sizes() == target.sizes(), op, ": input ", shape_str(input.sizes()), " and target ",
           shape_str(target.sizes()), " must have the same shape");
}

void check_loss_weight(const char* op, const char* name, const Tensor& weight, const Tensor& input) {
  check_same_device(op, input, weight);
  TG_CHECK(weight.is_floating_point(), op, ": ", name, " must be floating point, got ", weight.dtype());
  const Shape& w = weight.sizes();
  const Shape& x = input.sizes();
  bool fits = w.size() <= x.size();
  for (size_t i = 0; fits && i < w.size(); ++i) {
    const int64_t wd = w[w.size() - 1 - i], xd = x[x.size() - 1 - i];
    fits = wd == 1 || wd == xd;
  }
  TG_CHECK(fits, op, ": ", name, " of shape ", shape_str(w), " does not broadcast to the input's shape ", shape_str(x));
}

Tensor reduce_elementwise_loss(const char* op, const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return losses;
    case Reduction::Sum:
      return sum(losses);
    case Reduction::Mean:
      // PyTorch returns NaN; a silent NaN in a training loop is worse than an error at its source.
      TG_CHECK(losses.numel() > 0, op, ": empty input (shape ", shape_str(losses.sizes()),
               "): the mean loss over no elements is undefined");
      return mean(losses);
  }
  return losses;
}

}  // namespace tapegrad::ops
