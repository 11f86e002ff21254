// The element access and TF32 rounding that the reference products of cuBLAS (cublas.cpp) and
// cuBLASLt (cublaslt.cpp) share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cublas_v2.h"

namespace tapegrad_emu {

// Records `status` with the emulator's reason (which cublasGetStatusString appends), prints the
// reason, and returns the status.
cublasStatus_t reject(cublasStatus_t status, const std::string& detail);

size_t element_size(cudaDataType t);  // 0 for a type the emulator does not know
double load(const void* p, cudaDataType t, int64_t i);
void store(void* p, cudaDataType t, int64_t i, double v);
// f32 -> TF32: round to nearest even at 10 mantissa bits, as the tensor cores read it.
double to_tf32(double v);

}  // namespace tapegrad_emu
