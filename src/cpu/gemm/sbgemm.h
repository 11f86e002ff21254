// bfloat16 matrix products with float32 accumulation on the CPU (see Note [bf16 products] in
// sbgemm.cpp): the low-precision products of mixed precision, where a product's operands are
// rounded to bf16 and its sums kept in f32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tapegrad/core/half.h"

namespace tapegrad::cpu {

// The kernels of the products, slowest first: the portable path rounds the operands to bf16 and
// multiplies them in f32 (the same values to within the order of the f32 sums); AVX512-BF16 uses
// vdpbf16ps (Note [bf16 products] in sbgemm.cpp); AMX uses the tile unit (Note [AMX products] in
// sbgemm_amx.cpp).
enum class SbgemmKernel { Portable, Avx512Bf16, Amx };

// The fastest kernel this CPU, its operating system and this build have.
SbgemmKernel sbgemm_best_kernel();
// The kernel products use now: the best one, or a slower one that tests asked for.
SbgemmKernel sbgemm_kernel();
// Tests run every path the CPU has: products use at most `most` (per process) until called again
// (SbgemmKernel::Amx restores the best).
void sbgemm_limit_kernel(SbgemmKernel most);
const char* sbgemm_kernel_name(SbgemmKernel kernel);  // "portable", "avx512-bf16", "amx"

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
  // Native: panels of 32 columns, each depth pair (2p, 2p + 1) of a column side by side, the pairs
  // padded with zeros to a multiple of 16 (whole AMX tiles).
  const uint16_t* pairs() const { return pairs_.get(); }
  // Portable: the rounded values as floats, row-major [k, n].
  const float* floats() const { return floats_.data(); }

 private:
  template <class T>
  void pack(const T* b, int64_t rs, int64_t cs);
  int64_t k_ = 0, n_ = 0;
  bool native_ = false;
  // Not a vector: the packing writes every element, and zero-filling first cost as much as the
  // packing of a small product's weights.
  std::shared_ptr<uint16_t[]> pairs_;
  std::vector<float> floats_;
};

// Where a product's float32 sums are also rounded to: bf16 rows `ld` apart (none when out is null).
// Each thread rounds the columns it computed as soon as they are done, while they are in its cache.
struct RoundedOutput {
  BFloat16* out = nullptr;
  int64_t ld = 0;
  // Rounds C's rows [i0, i1), columns [j0, j1) into out.
  void columns(int64_t i0, int64_t i1, const float* c, int64_t ldc, int64_t j0, int64_t j1) const;
};

// C = alpha * bf16(A) B + beta * C (+ bias), C m x n float32 row-major (leading dimension ldc), A m x
// k with element (i, p) at a[i * a_rs + p * a_cs], rounded to bf16 as it is read. beta = 0 sets C
// (its old contents are never read). Threads over the shared OpenMP pool when large enough, serial
// inside a parallel region. With `rounded`, C is also rounded to bf16 there (C is then scratch
// space, which a product of depth 2048 or less neither reads nor writes when beta = 0). `bias` (n
// floats) is added to every row; with beta = 0 that gives the bits of beta = 1 over a C holding the
// bias in every row, without that pass over C.
void sbgemm(int64_t m, float alpha, const float* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b, float beta,
            float* c, int64_t ldc, const RoundedOutput& rounded = {}, const float* bias = nullptr);
void sbgemm(int64_t m, float alpha, const BFloat16* a, int64_t a_rs, int64_t a_cs, const PackedBf16Matrix& b,
            float beta, float* c, int64_t ldc, const RoundedOutput& rounded = {}, const float* bias = nullptr);

// The same product with B not yet packed (k x n, element (p, j) at b[p * b_rs + j * b_cs], float32
// or bf16): packed once and multiplied as above, except where the product is shared by rows of C
// (sbgemm_splits_rows): there every thread packs its own copy of B and multiplies its own rows, so
// that no thread reads panels that another core has just written (Note [shallow products split by
// rows], sbgemm.cpp).
template <class TA, class TB>
void sbgemm_unpacked(int64_t m, int64_t k, int64_t n, float alpha, const TA* a, int64_t a_rs, int64_t a_cs, const TB* b,
                     int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc, const RoundedOutput& rounded = {},
                     const float* bias = nullptr);

// Note [products computed transposed] (sbgemm.cpp): whether C (n x m) = A (n x k) B (k x m) is
// cheaper as C^T = B^T A^T, given B's strides (element (p, j) at b[p * b_rs + j * b_cs]).
bool sbgemm_transposed_is_cheaper(int64_t n, int64_t k, int64_t m, int64_t b_rs, int64_t b_cs);

// Whether the AVX512-BF16 kernel shares an m x k times k x n product between `threads` threads by
// rows of C rather than by panels of columns (Note [shallow products split by rows], sbgemm.cpp);
// false for products too small to share at all.
bool sbgemm_splits_rows(int64_t m, int64_t k, int64_t n, int threads);

// C (n x m) = T^T + beta * C for T (m x n float32, row-major, leading dimension ldt): a transposed
// product's last step. C is float32 (c) or bf16 (c16, rounded once), ldc apart; beta = 0 never
// reads it.
void store_transposed(const float* t, int64_t ldt, int64_t n, int64_t m, float beta, float* c, BFloat16* c16,
                      int64_t ldc);

}  // namespace tapegrad::cpu
