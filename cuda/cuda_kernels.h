// The CUDA backend's kernel families. Each family lives in its own files and fills its slots of
// the kernel table in one register function; cuda_backend.cpp calls them all.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cuda_backend {

// The caching device allocator (memory.cpp / caching_allocator.cpp).
Allocator& device_allocator();

void register_memory(backend::KernelTable& table);  // allocator, host<->device copies
void register_pointwise(
    backend::KernelTable& table);  // copy, fill, arange, random, unary, binary, compare, where, clamp
void register_reductions(backend::KernelTable& table);       // reduce, softmax, layer_norm, cross-entropy, index ops
void register_blas(backend::KernelTable& table);             // gemm, bmm (cuBLAS)
void register_blas_lt(backend::KernelTable& table);          // gemm_bias, gemm_bias_grad (cuBLASLt epilogues)
void register_lstm_recurrence(backend::KernelTable& table);  // a layer's whole recurrence
void register_optim(backend::KernelTable& table);            // SGD / Adam, multi-tensor
void register_amp(backend::KernelTable& table);              // GradScaler's fused unscale
void register_cudnn(backend::KernelTable& table);            // the cuDNN LSTM

// Functions shared between families.
void copy_from_cpu(const Tensor& src_cpu, const Tensor& dst);
void copy_to_cpu(const Tensor& src, const Tensor& dst_cpu);
void fill(const Tensor& out, double value);

}  // namespace tapegrad::cuda_backend
