// The CUDA backend's kernels registered so far (the rest of the table is its own work item: an
// empty slot gives "no cuda kernel for <name>").
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cuda_backend {

Allocator& device_allocator();

// memory.cpp
void copy_from_cpu(const Tensor& src_cpu, const Tensor& dst);
void copy_to_cpu(const Tensor& src, const Tensor& dst_cpu);
void copy(const Tensor& src, const Tensor& dst);

// fill.cu
void fill(const Tensor& out, double value);

}  // namespace tapegrad::cuda_backend
