// l1_loss, smooth_l1_loss and huber_loss, composed from differentiable elementwise ops (each
// branch of the piecewise forms is finite everywhere, so `where` passes no NaN gradients).
#include "amp/policy.h"
#include "ops/elementwise_loss.h"
#include "ops/op_helpers.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/loss.h"

namespace tapegrad {

using namespace ops;

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::l1_loss, {&input, &target}).float32)
    return l1_loss((*f)[0], (*f)[1], reduction);
  check_elementwise_loss("l1_loss", input, target);
  return reduce_elementwise_loss("l1_loss", abs(sub(input, target)), reduction);
}

// PyTorch: z < beta ? 0.5 z^2 / beta : z - 0.5 beta, with z = |input - target|.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::smooth_l1_loss, {&input, &target}).float32)
    return smooth_l1_loss((*f)[0], (*f)[1], reduction, beta);
  check_elementwise_loss("smooth_l1_loss", input, target);
  TG_CHECK(beta >= 0.0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  if (beta == 0.0) return reduce_elementwise_loss("smooth_l1_loss", abs(sub(input, target)), reduction);
  Tensor diff = sub(input, target);
  Tensor z = abs(diff);
  Tensor losses = where(lt(z, beta), mul(square(diff), 0.5 / beta), sub(z, 0.5 * beta));
  return reduce_elementwise_loss("smooth_l1_loss", losses, reduction);
}

// PyTorch: z < delta ? 0.5 z^2 : delta (z - 0.5 delta), with z = |input - target|.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::huber_loss, {&input, &target}).float32)
    return huber_loss((*f)[0], (*f)[1], reduction, delta);
  check_elementwise_loss("huber_loss", input, target);
  TG_CHECK(delta > 0.0, "huber_loss: delta must be > 0, got ", delta);
  Tensor diff = sub(input, target);
  Tensor z = abs(diff);
  Tensor losses = where(lt(z, delta), mul(square(diff), 0.5), mul(sub(z, 0.5 * delta), delta));
  return reduce_elementwise_loss("huber_loss", losses, reduction);
}

}  // namespace tapegrad
