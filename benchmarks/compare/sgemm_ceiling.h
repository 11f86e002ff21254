// The sgemm rate this machine reaches right now, measured in the same run as the training steps, so
// that a configuration's GFLOP/s can be read as a distance to the hardware limit rather than alone.
#pragma once

#include <cstdint>

namespace tapegrad::bench {

struct SgemmCeiling {
  int64_t n = 0;  // an n x n x n float product
  int calls = 0;  // timed calls per side; the best one counts
  int threads = 0;
  double openblas_gflops = 0;       // cblas_sgemm directly
  double tapegrad_gflops = 0;       // tapegrad::matmul, allocation of the result included
  double tapegrad_bf16_gflops = 0;  // the same under amp::AutocastGuard (bf16 products, f32 sums); 0: not measured
  double tapegrad_bf16_operands_gflops =
      0;             // matmul of two bf16 tensors (the product alone, no casts); 0: not measured
  int readings = 1;  // measurements merged into this one (best of each field): before and after the rows
  // The ceiling the percentages use: whichever path is faster is what the hardware can at least do.
  double gflops() const { return openblas_gflops > tapegrad_gflops ? openblas_gflops : tapegrad_gflops; }
};

// The best of two readings, field by field. On a shared machine one reading of a few calls can come
// out 15-20% low (2048^3 read 366 and 443 GFLOP/s in two runs of the same binary minutes apart, each
// on a quiet pair of cores); a ceiling that low puts steps above 100% of it.
SgemmCeiling best_of(const SgemmCeiling& a, const SgemmCeiling& b);

// Two warm-up calls then the best of `calls`, on the threads set with tapegrad::set_num_threads.
// About 15 products of 17 GFLOP each at n = 2048: a second or so at 250 GFLOP/s.
// with_bf16 also times matmul under autocast (bf16 products, the f32 operands cast first) and matmul
// of bf16 tensors (the bf16 GEMM alone).
SgemmCeiling measure_sgemm_ceiling(int64_t n = 2048, int calls = 5, bool with_bf16 = false);

}  // namespace tapegrad::bench
