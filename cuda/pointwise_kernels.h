// The pointwise family's kernel-table slots on CUDA, one file per group (copy.cu, fill.cu, random.cu,
// unary.cu, binary.cu, select.cu); pointwise.cu registers them. Contracts: backend/kernel_slots.def.
#pragma once

#include <cstdint>

#include "backend/kernel_table.h"

namespace tapegrad::cuda_backend {

using backend::BinaryOp;
using backend::CompareOp;
using backend::UnaryOp;

void copy(const Tensor& src, const Tensor& dst);
// fill is declared in cuda_kernels.h (other families use it too).
void arange(const Tensor& out, double start, double step);

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset);
void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset);
void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset);

void unary(UnaryOp op, math::Scalars<double> scalars, const Tensor& x, const Tensor& out);
void unary_backward(UnaryOp op, math::Scalars<double> scalars, const Tensor& grad, const Tensor& x, const Tensor& y,
                    const Tensor& grad_x);

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void binary_scalar(BinaryOp op, const Tensor& a, double b, const Tensor& out);
void compare_scalar(CompareOp op, const Tensor& a, double b, const Tensor& out);

void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out);
void clamp(const Tensor& x, double min, double max, const Tensor& out);

}  // namespace tapegrad::cuda_backend
