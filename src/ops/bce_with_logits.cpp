// binary_cross_entropy_with_logits, PyTorch's formula composed from differentiable ops:
//   loss = weight * ((1 - y) x - lw * log_sigmoid(x)),  lw = 1 + (pos_weight - 1) y,
//   log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)).
// exp only ever sees -|x| <= 0, so nothing overflows for any finite x. At x = 0 the kinks of min
// and |x| meet; minimum splits a tie's gradient evenly and |x|' is 0 there, which gives the
// true derivative sigmoid(0) - y = 0.5 - y.
#include "amp/policy.h"
#include "ops/elementwise_loss.h"
#include "ops/op_helpers.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/loss.h"

namespace tapegrad {

using namespace ops;

namespace {

// log1p(u) for u in [0, 1] without a log1p kernel: log(1 + u) alone loses u's low bits (all of
// them once u < 1e-16, e.g. x = 40 and y = 1, where the loss is log1p(e^-40) = 4.2e-18). With
// w = 1 + u, the rounding error (w - 1) - u is known exactly and log(w) - ((w - 1) - u) / w
// restores it (Goldberg, "What every computer scientist should know about floating point").
// The correction's derivative in u is 0 up to rounding, so gradients are unchanged.
Tensor log1p_small(const Tensor& u) {
  Tensor w = add(u, 1.0);
  return sub(log(w), div(sub(sub(w, 1.0), u), w));
}

}  // namespace

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::binary_cross_entropy_with_logits, {&input, &target}).float32)
    return binary_cross_entropy_with_logits((*f)[0], (*f)[1], options);
  const char* op = "binary_cross_entropy_with_logits";
  check_elementwise_loss(op, input, target);
  if (options.weight.defined()) check_loss_weight(op, "weight", options.weight, input);
  if (options.pos_weight.defined()) check_loss_weight(op, "pos_weight", options.pos_weight, input);
  Tensor log_sigmoid = sub(minimum(input, 0.0), log1p_small(exp(neg(abs(input)))));
  if (options.pos_weight.defined()) log_sigmoid = mul(log_sigmoid, add(mul(sub(options.pos_weight, 1.0), target), 1.0));
  Tensor losses = sub(mul(add(neg(target), 1.0), input), log_sigmoid);
  if (options.weight.defined()) losses = mul(losses, options.weight);
  return reduce_elementwise_loss(op, losses, options.reduction);
}

}  // namespace tapegrad
