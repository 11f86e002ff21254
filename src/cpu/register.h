// The CPU backend's parts, each filling its own slots of the kernel table; cpu_backend.cpp calls
// them in order. A family's kernels are private to its file: the slots are their interface, and
// their signatures and overwrite/accumulate contracts are those of backend/kernel_slots.def.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cpu {

// The op kinds of the slot signatures, named once for every CPU file.
using backend::BinaryOp;
using backend::CompareOp;
using backend::ReduceOp;
using backend::UnaryOp;

void register_allocator(backend::KernelTable& t);   // runtime/caching_allocator.cpp
void register_copy_fill(backend::KernelTable& t);   // kernels/copy_fill.cpp: copy, fill, arange, random draws
void register_pointwise(backend::KernelTable& t);   // kernels/pointwise.cpp: binary, compare, where, clamp
void register_unary(backend::KernelTable& t);       // kernels/unary.cpp
void register_reduce(backend::KernelTable& t);      // kernels/reduce.cpp
void register_gemm(backend::KernelTable& t);        // gemm/gemm.cpp: gemm, gemm_mixed, gemm_bias, bmm
void register_softmax(backend::KernelTable& t);     // kernels/softmax.cpp: softmax and cross_entropy
void register_layer_norm(backend::KernelTable& t);  // kernels/layer_norm.cpp
void register_indexing(backend::KernelTable& t);    // kernels/indexing.cpp
void register_lstm(backend::KernelTable& t);        // kernels/lstm.cpp
void register_optim(backend::KernelTable& t);       // kernels/optim.cpp
void register_amp(backend::KernelTable& t);         // kernels/amp.cpp
// half/widening.cpp: the 16-bit layer over the float32-only kernels flagged TG_WIDEN_16BIT in
// backend/kernel_slots.def. Runs last: it wraps what the families registered.
void register_16bit_widening(backend::KernelTable& t);

}  // namespace tapegrad::cpu
