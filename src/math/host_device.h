// TG_HD marks arithmetic shared by the CPU loops and the CUDA kernels: written once, compiled for
// both sides by nvcc, and as plain inline functions by the host compiler.
#pragma once

#if defined(__CUDACC__)
#define TG_HD __host__ __device__ __forceinline__
#else
#define TG_HD inline
#endif
