// The few CPU kernels that other CPU files call directly (every other kernel is private to its
// family's file and reached through the kernel table): the copy and fill that gemm/gemm.cpp,
// kernels/lstm.cpp and half/widening.cpp use for their scratch tensors, and the binary add with
// which kernels/lstm_weight_layout.cpp sums the two LSTM biases. Contracts: backend/kernel_slots.def.
#pragma once

#include "backend/kernel_table.h"
#include "cpu/register.h"

namespace tapegrad::cpu {

void copy(const Tensor& src, const Tensor& dst);                                // kernels/copy_fill.cpp
void fill(const Tensor& out, double value);                                     // kernels/copy_fill.cpp
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);  // kernels/pointwise.cpp

}  // namespace tapegrad::cpu
