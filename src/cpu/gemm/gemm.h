// The CPU's gemm_mixed slot kernel (gemm/gemm.cpp), declared because tests/cpu/test_cpu_sbgemm.cpp runs
// it directly on operands laid out as the products path sees them. Contract: backend/kernel_slots.def.
#pragma once

#include "backend/kernel_table.h"

namespace tapegrad::cpu {

void gemm_mixed(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta, DType products);

}  // namespace tapegrad::cpu
