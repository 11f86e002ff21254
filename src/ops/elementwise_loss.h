// Checks and reduction shared by the elementwise losses (l1, smooth_l1, huber, BCE with logits).
#pragma once

#include "tapegrad/core/tensor.h"
#include "tapegrad/ops/loss.h"

namespace tapegrad::ops {

// input and target defined, floating point, on one device, of the same shape.
void check_elementwise_loss(const char* op, const Tensor& input, const Tensor& target);
// `name` (weight, pos_weight) defined, floating point, on input's device, and broadcastable to
// input's shape without enlarging it (the loss keeps the input's shape).
void check_loss_weight(const char* op, const char* name, const Tensor& weight, const Tensor& input);
// none: `losses` itself; sum; mean over every element (an empty input throws, naming `op`).
Tensor reduce_elementwise_loss(const char* op, const Tensor& losses, Reduction reduction);

}  // namespace tapegrad::ops
