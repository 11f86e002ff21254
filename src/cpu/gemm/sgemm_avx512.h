// tapegrad's own float GEMM for CPUs with AVX-512 (see Note [why our own sgemm] in sgemm_avx512.cpp).
#pragma once

#include <cstdint>

namespace tapegrad::cpu {

// Whether this build has the kernel and this CPU can run it (AVX-512F).
bool sgemm_avx512_available();

// Whether OpenBLAS picked one of its AVX-512 kernel families for this CPU when it loaded.
bool openblas_uses_avx512();

// Whether a float product C[m, n] = A[m, k] B[k, n] goes through sgemm_avx512 now (gemm_selection.cpp:
// set_cpu_gemm and TAPEGRAD_CPU_GEMM decide, and under Auto the size, Note [choosing the float
// kernel by size]).
bool use_sgemm_avx512(int64_t m, int64_t n, int64_t k);

// Whether sgemm_avx512 computes this product as C^T = B^T A^T (Note [weight gradients as transposed
// products] and Note [linear's forward as a transposed product]): the same bits either way; for tests.
bool sgemm_avx512_via_c_transposed(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs,
                                   int64_t b_cs);

// Whether a thread's block of `rows` rows of C reads B (element (p, j) at b[p * b_rs + j * b_cs]) in
// place rather than packing it (Note [B in place for a few hundred rows]): the same bits either
// way; for tests.
bool sgemm_avx512_reads_b_in_place(int64_t rows, int64_t b_rs, int64_t b_cs);

// C = alpha * A B + beta * C, where A is m x k with element (i, p) at a[i * a_rs + p * a_cs], B is
// k x n with element (p, j) at b[p * b_rs + j * b_cs], and C is m x n row-major with leading
// dimension ldc. Any strides are accepted (rows or columns contiguous are the fast cases). beta = 0
// sets C: its old contents are never read. Threads over the shared OpenMP pool when the product
// is large enough, serial inside a parallel region. Requires sgemm_avx512_available().
// bias (beta must then be 0): n values added to every row, C = alpha * A B + bias, as the kernel
// writes each tile; the bits equal copying the bias into every row of C and passing beta = 1, without
// that pass over C.
void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                  const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc,
                  const float* bias = nullptr);

// B laid out once for many products with it (Note [B laid out once for many products] in
// sgemm_avx512.cpp): the kernel's own panels, read contiguously instead of across B's rows.
// The floats B [k, n] takes laid out.
int64_t sgemm_b_panels_floats(int64_t k, int64_t n);
// Lays out B [k, n], element (p, j) at b[p * b_rs + j * b_cs], into `panels`
// (sgemm_b_panels_floats(k, n) floats, 64-byte aligned).
void sgemm_lay_out_b_panels(int64_t k, int64_t n, const float* b, int64_t b_rs, int64_t b_cs, float* panels);
// sgemm_avx512 with B given as its laid-out panels: the same bits as the same product with B itself.
// Requires sgemm_avx512_available().
void sgemm_avx512_b_panels(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                           const float* panels, float beta, float* c, int64_t ldc, const float* bias = nullptr);

}  // namespace tapegrad::cpu
