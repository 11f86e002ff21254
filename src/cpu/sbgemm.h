// bfloat16 matrix products with float32 accumulation on the CPU (see Note [bf16 products] in
// sbgemm.cpp): the low-precision products of mixed precision, where a product's operands are
// rounded to bf16 and its sums kept in f32.
#pragma once

#include <cstdint>
#include <vector>

#include "tapegrad/core/half.h"

namespace tapegrad::cpu {

// Whether this CPU has AVX512-BF16 (vdpbf16ps) and this build the kernel that uses it; elsewhere
// the products round their operands to bf16 and multiply them in f32 (the same values to within
// the order of the f32 sums).
bool sbgemm_native_available();
// Whether the products use the AVX512-BF16 kernel now: native and not switched off for tests.
bool sbgemm_uses_native();
// Tests run both paths on CPUs that have both: false forces the portable one (per process).
void sbgemm_force_portable(bool portable);

// B (k x n, element (p, j) at b[p * rs + j * cs]) rounded to bf16 and laid out once for any number
// of products: an LSTM's weights, reused by every timestep. Which layout depends on the path
// chosen when it was packed.
class PackedBf16Matrix {
 public:
  PackedBf16Matrix() = default;
  PackedBf16Matrix(const float* b, int64_t rs, int64_t cs, int64_t k, int64_t n);
  PackedBf16Matrix(const BFloat16* b, int64_t rs, int64_t cs, int64_t k, int64_t n);
  int64_t rows() const { return k_; }
  int64_t cols() const { return n_; }
  bool native() const { return native_; }
  // Native: panels of 32 columns, each depth pair (2p, 2p + 1) of a column side by side.
  const uint16_t* pairs() const { return pairs_.data(); }
  // Portable: the rounded values as floats, row-major [k, n].
  const float* floats() const { return floats_.data(); }

 private:
  template <class T>
  void pack(const T* b, int64_t rs, int64_t cs);
  int64_t k_ = 0, n_ = 0;
  bool native_ = false;
  std::vector<uint16_t> pairs_;
  std::vector<float> floats_;
};

// C = alpha * bf16(A) B + beta * C, C m x n float32 row-major (leading dimension ldc), A m x k with
// element (i, p) at a[i * a_rs + p * a_cs], rounded to bf16 as it is read. beta = 0 sets C (its old
// contents are never read). Threads over the shared OpenMP pool when large enough, serial inside
// a parallel region.
void sbgemm(int64_t m, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b, float beta,
            float* c, int64_t ldc);
void sbgemm(int64_t m, float alpha, const BFloat16* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b,
            float beta, float* c, int64_t ldc);

}  // namespace tapegrad::cpu
