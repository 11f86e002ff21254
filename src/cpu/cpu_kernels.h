// The CPU backend's kernels, one family per file, registered by cpu_backend.cpp.
// Signatures and overwrite/accumulate contracts are those of the slots in backend/kernel_slots.def.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cpu {

using backend::BinaryOp;
using backend::CompareOp;
using backend::ReduceOp;
using backend::UnaryOp;

Allocator& cpu_allocator();

// copy_fill.cpp
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& out, double value);
void arange(const Tensor& out, double start, double step);
void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset);
void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset);
void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset);

// pointwise.cpp
void unary(UnaryOp op, math::Scalars<double> scalars, const Tensor& x, const Tensor& out);
void unary_backward(UnaryOp op, math::Scalars<double> scalars, const Tensor& grad, const Tensor& x, const Tensor& y,
                    const Tensor& grad_x);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out);
void clamp(const Tensor& x, double min, double max, const Tensor& out);

// reduce.cpp
void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner);
void reduce_with_index(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer,
                       int64_t reduced, int64_t inner);

// gemm.cpp
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);
void gemm_mixed(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta, DType products);
void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, DType products);
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);

// softmax.cpp
void softmax(const Tensor& x, const Tensor& out, bool log);
void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log);
void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   const Tensor& reduced, const Tensor& count, int64_t ignore_index, double label_smoothing);
void cross_entropy_backward(const Tensor& grad_losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                            const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                            double label_smoothing);

// layer_norm.cpp
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias);

// indexing.cpp
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, backend::DeviceCheck check);
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, backend::DeviceCheck check);
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, backend::DeviceCheck check);
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, backend::DeviceCheck check);

// lstm.cpp
void lstm_recurrence_forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                             const Tensor& b_hh, const Tensor& h0, const Tensor& c0, const Tensor& gates,
                             const Tensor& h_all, const Tensor& c_all, const Tensor& lengths, bool reverse,
                             DType products);
void lstm_recurrence_backward(const Tensor& gates, const Tensor& w_hh, const Tensor& c0, const Tensor& c_all,
                              const Tensor& grad_h_all, const Tensor& grad_h_n, const Tensor& grad_c_n,
                              const Tensor& dh, const Tensor& dc, const Tensor& dgates, const Tensor& grad_b_ih,
                              const Tensor& grad_b_hh, const Tensor& lengths, bool reverse, DType products);

// optim.cpp
void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const math::SgdHyper& hyper);
void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const math::AdamHyper& hyper);
void sgd_step_many(const std::vector<backend::SgdTensors>& params, const math::SgdHyper& hyper);
void adam_step_many(const std::vector<backend::AdamTensors>& params, const math::AdamHyper& hyper);

// amp.cpp
void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale);

}  // namespace tapegrad::cpu
