// isclose and allclose, following PyTorch's isclose: equality first (so equal infinities are
// close), then the tolerance test only where |a - b| is finite (else inf <= atol + rtol * inf
// would call 1 and inf close).
#include <limits>

#include "ops/op_helpers.h"
#include "tapegrad/ops/compare.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

using namespace ops;

namespace {

// Bool tensors combined through where (there is no logical-op kernel): a && b, a || b.
Tensor both(const Tensor& a, const Tensor& b) {
  return where(a, b, a);
}
Tensor either(const Tensor& a, const Tensor& b) {
  return where(a, a, b);
}

// The dtype the comparison computes in: integers and bool in float64 (exact for |v| < 2^53),
// 16-bit floats in float32 (exact; the CPU cannot compute in them).
Tensor compute_form(const Tensor& t) {
  if (!t.is_floating_point()) return cast(t, kFloat64);
  if (t.dtype() == kFloat16 || t.dtype() == kBFloat16) return cast(t, kFloat32);
  return t;
}

}  // namespace

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("isclose", a, "first operand");
  check_defined("isclose", b, "second operand");
  check_same_device("isclose", a, b);
  TG_CHECK(a.dtype() == b.dtype(), "isclose: a and b must have the same dtype, got ", a.dtype(), " and ", b.dtype());
  TG_CHECK(rtol >= 0.0, "isclose: rtol must be >= 0, got ", rtol);  // also rejects NaN
  TG_CHECK(atol >= 0.0, "isclose: atol must be >= 0, got ", atol);
  broadcast_shapes("isclose", a.sizes(), b.sizes());
  NoGradGuard no_grad;
  Tensor x = compute_form(a.detach()), y = compute_form(b.detach());
  Tensor close = eq(x, y);
  if (equal_nan) close = either(close, both(ne(x, x), ne(y, y)));
  if (rtol == 0.0 && atol == 0.0) return close;
  Tensor actual = abs(sub(x, y));
  Tensor allowed = add(abs(mul(y, rtol)), atol);
  Tensor finite_and_within = both(lt(actual, std::numeric_limits<double>::infinity()), le(actual, allowed));
  return either(close, finite_and_within);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  Tensor close = isclose(a, b, rtol, atol, equal_nan);
  return sum(close).item<int64_t>() == close.numel();
}

}  // namespace tapegrad
