// The slots of the reduction family (reduce.cu, softmax.cu, layer_norm.cu, cross_entropy.cu,
// indexing.cu), which reductions.cu registers. Signatures and overwrite/accumulate contracts are
// those of backend/kernel_slots.def.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cuda_backend {

using backend::ReduceOp;

// reduce.cu
void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner);
void reduce_with_index(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer,
                       int64_t reduced, int64_t inner);

// softmax.cu
void softmax(const Tensor& x, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log);

// layer_norm.cu
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);

// cross_entropy.cu
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   const Tensor& reduced, const Tensor& count, int64_t ignore_index, double label_smoothing);
void cross_entropy_backward(const Tensor& grad_losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                            const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                            double label_smoothing);

// indexing.cu
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, backend::DeviceCheck check);
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, backend::DeviceCheck check);
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, backend::DeviceCheck check);
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, backend::DeviceCheck check);
void check_values(const Tensor& values, int64_t limit, int64_t ignore_index, backend::DeviceCheck check);

}  // namespace tapegrad::cuda_backend
