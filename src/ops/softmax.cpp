// softmax and log_softmax along any dim: the kernel works on rows of the last dim, so another dim
// is moved last (one copy) and back.
#include "amp/policy.h"
#include "ops/op_helpers.h"
#include "tapegrad/ops/loss.h"

namespace tapegrad {

using namespace ops;

namespace {

Tensor softmax_last_dim(const Tensor& x, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  Tensor in = x.detach().contiguous();
  Tensor out = empty_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) TG_KERNEL(x.device(), softmax)(in, out, log);
  if (any_requires_grad({x})) {
    SavedTensor y = out;
    record(name, {x}, {out}, [y, log](const std::vector<Tensor>& g) {
      Tensor result = y.get();
      Tensor grad = empty_tensor(result.sizes(), result.dtype(), result.device());
      if (grad.numel() > 0) TG_KERNEL(result.device(), softmax_backward)(g[0].contiguous(), result, grad, log);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor softmax_any_dim(const Tensor& x, int64_t dim, bool log) {
  if (auto f = amp::autocast_inputs(log ? amp::AutocastOp::log_softmax : amp::AutocastOp::softmax, {&x}).float32)
    return softmax_any_dim((*f)[0], dim, log);
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(name, x);
  check_floating(name, x);
  if (x.dim() == 0) return softmax_last_dim(x.reshape({1}), log).reshape({});
  int64_t d = wrap_dim(name, dim, x.dim());
  if (d == x.dim() - 1) return softmax_last_dim(x, log);
  return softmax_last_dim(x.transpose(d, -1), log).transpose(d, -1);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_any_dim(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_any_dim(x, dim, true);
}

}  // namespace tapegrad
