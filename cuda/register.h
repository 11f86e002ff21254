// The CUDA backend's kernel families, one register function each. A family's file ends with its
// register function, which fills the family's slots of the kernel table (backend/kernel_slots.def)
// with the file's own, private, launchers; cuda_backend.cpp calls them all. This is the one header
// the families share with the backend's registration; nothing else of a family is visible outside
// its file.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cuda_backend {

// runtime/memory.cpp: the caching device allocator and the host<->device copies.
void register_memory(backend::KernelTable& table);

// kernels/: the pointwise families.
void register_copy(backend::KernelTable& table);    // copy.cu: copy (strided, with dtype conversion)
void register_fill(backend::KernelTable& table);    // fill.cu: fill, arange
void register_random(backend::KernelTable& table);  // random.cu: uniform, normal, randint (Philox)
void register_unary(backend::KernelTable& table);   // unary.cu: unary, unary_backward
void register_binary(backend::KernelTable& table);  // binary.cu: binary, compare and their scalar forms
void register_select(backend::KernelTable& table);  // select.cu: where, clamp

// kernels/: the reductions and the row-wise and index ops.
void register_reduce(backend::KernelTable& table);           // reduce.cu: reduce, reduce_with_index
void register_softmax(backend::KernelTable& table);          // softmax.cu: softmax and its backward
void register_layer_norm(backend::KernelTable& table);       // layer_norm.cu: layer_norm and its backward
void register_cross_entropy(backend::KernelTable& table);    // cross_entropy.cu: cross_entropy and its backward
void register_indexing(backend::KernelTable& table);         // indexing.cu: index_select/add, gather, scatter_add,
                                                             // check_values
void register_lstm_recurrence(backend::KernelTable& table);  // lstm_recurrence.cu: a layer's whole recurrence
void register_optim(backend::KernelTable& table);            // optim.cu: SGD / Adam, one tensor and multi-tensor
void register_amp(backend::KernelTable& table);              // amp.cu: GradScaler's fused unscale

// blas/: cuBLAS and cuBLASLt.
void register_blas(backend::KernelTable& table);     // blas.cpp: gemm, gemm_mixed, bmm
void register_blas_lt(backend::KernelTable& table);  // blas_lt.cpp: gemm_bias, gemm_bias_grad (epilogues)

// cudnn/cudnn_lstm.cpp: the cuDNN LSTM (not in the emulation build, which has no cuDNN).
void register_cudnn(backend::KernelTable& table);

}  // namespace tapegrad::cuda_backend
