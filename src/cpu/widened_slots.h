// The CPU kernels that take float16 and bfloat16 tensors through float32 copies (widened_slots.cpp);
// the same signatures as their float32 kernels in cpu_kernels.h, which they call.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cpu::widened {

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset);
void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset);
void reduce(backend::ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner);
void reduce_with_index(backend::ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices,
                       int64_t outer, int64_t reduced, int64_t inner);
void softmax(const Tensor& x, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log);
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   const Tensor& reduced, const Tensor& count, int64_t ignore_index, double label_smoothing);
void cross_entropy_backward(const Tensor& grad_losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                            const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                            double label_smoothing);
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);

}  // namespace tapegrad::cpu::widened
