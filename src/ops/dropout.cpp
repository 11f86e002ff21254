// dropout, composed of rand, ge and mul, so its backward is theirs: the gradient is masked and
// scaled by the same kept/(1-p) factor as the forward.
#include "tapegrad/ops/dropout.h"

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad {

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  TG_CHECK(p >= 0 && p <= 1, "dropout: probability has to be between 0 and 1, but got ", p);
  ops::check_defined("dropout", x);
  if (!training || p == 0) return x;
  TG_CHECK(x.is_floating_point(), "dropout: expected a floating-point tensor, got ", x.dtype());
  if (p == 1) return mul(x, 0.0);
  Tensor keep = ge(rand(x.sizes(), TensorOptions(x.dtype()).device(x.device()), generator), p);
  return mul(x, mul(keep.to(x.dtype()), 1.0 / (1.0 - p)));
}

}  // namespace tapegrad
