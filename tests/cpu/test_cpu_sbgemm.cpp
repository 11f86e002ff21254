// The bf16 products with f32 accumulation (src/cpu/gemm/sbgemm.h) against a double-precision reference
// of the bf16-rounded operands: every edge of the blocking (tile rows, panel columns, depth blocks
// and an odd depth), both layouts of each operand, f32 and bf16 sources, alpha and beta, one and
// two threads, on the AMX and AVX512-BF16 kernels where the CPU has them and on the portable path
// always.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu/gemm/gemm.h"
#include "cpu/gemm/sbgemm.h"
#include "support/gemm_case.h"
#include "support/random_values.h"
#include "support/thread_count.h"
#include "tapegrad/tapegrad.h"

namespace {

using tapegrad::BFloat16;
using tapegrad::cpu::PackedBf16Matrix;
using tapegrad::cpu::SbgemmKernel;

using Case = tapegrad::testing::GemmCase;

using tapegrad::testing::ThreadCount;

// Selects a kernel for one scope (callers skip the ones the CPU lacks).
class Path {
 public:
  explicit Path(SbgemmKernel kernel) { tapegrad::cpu::sbgemm_limit_kernel(kernel); }
  ~Path() { tapegrad::cpu::sbgemm_limit_kernel(SbgemmKernel::Amx); }
};

bool has(SbgemmKernel kernel) {
  return kernel <= tapegrad::cpu::sbgemm_best_kernel();
}

constexpr SbgemmKernel kAllKernels[] = {SbgemmKernel::Portable, SbgemmKernel::Avx512Bf16, SbgemmKernel::Amx};

using tapegrad::testing::uniform_values;

double rounded(float v) {
  return static_cast<float>(BFloat16(v));
}

// Runs one case (operands as GemmOperands pads them, converted to Source) and checks every element
// of C against the double product of the rounded operands, and that C's padding is untouched.
// Returns the largest difference between C and the product of the unrounded operands (for the
// negative control).
template <class Source>
double check_case(const Case& t) {
  tapegrad::testing::GemmOperands o(t);
  const std::vector<Source> a(o.a.begin(), o.a.end()), b(o.b.begin(), o.b.end());
  const int64_t ldc = o.ldc;
  const std::vector<float>& c = o.c;
  const std::vector<float>& c_before = o.c_before;
  auto a_at = [&](int64_t i, int64_t p) { return o.a_at(i, p); };
  auto b_at = [&](int64_t p, int64_t j) { return o.b_at(p, j); };

  PackedBf16Matrix packed(b.data(), o.b_row_stride(), o.b_col_stride(), t.k, t.n);
  tapegrad::cpu::sbgemm(t.m, t.alpha, a.data(), o.a_row_stride(), o.a_col_stride(), packed, t.beta, o.c.data(), ldc);

  double off_unrounded = 0;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= t.n) {
        EXPECT_EQ(got, c_before[i * ldc + j]) << "wrote past column " << t.n;
        continue;
      }
      double want = 0, exact = 0, magnitude = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        want += rounded(a_at(i, p)) * rounded(b_at(p, j));
        exact += static_cast<double>(a_at(i, p)) * b_at(p, j);
        magnitude += std::fabs(rounded(a_at(i, p)) * rounded(b_at(p, j)));
      }
      want *= t.alpha, exact *= t.alpha;
      if (t.beta != 0.0f) {
        want += static_cast<double>(t.beta) * c_before[i * ldc + j];
        exact += static_cast<double>(t.beta) * c_before[i * ldc + j];
      }
      EXPECT_NEAR(got, want, 2e-6 * (magnitude + 1.0))
          << "C(" << i << ", " << j << ") of m=" << t.m << " n=" << t.n << " k=" << t.k;
      if (::testing::Test::HasFailure()) return off_unrounded;
      off_unrounded = std::max(off_unrounded, std::fabs(got - exact) / (magnitude + 1.0));
    }
  }
  return off_unrounded;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // Tile rows 1..12 and beyond, AMX row blocks of 16 and 32 and their edges, panel columns around
  // 16, 32 and 64, depth odd, across an AMX tile (32) and across a block (512).
  for (int64_t m : {1, 5, 12, 13, 16, 29, 32, 47})
    for (int64_t n : {1, 15, 16, 17, 32, 33, 70, 96})
      for (int64_t k : {1, 2, 7, 33, 64, 513, 1030}) out.push_back({m, n, k, false, false, 1.0f, 0.0f});
  for (bool at : {false, true})
    for (bool bt : {false, true}) {
      out.push_back({13, 45, 37, at, bt, 1.0f, 0.0f});
      out.push_back({25, 64, 600, at, bt, -0.5f, 1.0f});
      out.push_back({12, 33, 9, at, bt, 2.0f, 0.25f});
    }
  // More than one AMX block of panels (16 panels, 512 columns) and of depth (512) at once.
  out.push_back({33, 530, 600, false, false, 1.0f, 0.5f});
  return out;
}

void run_all(SbgemmKernel kernel, int threads) {
  Path path(kernel);
  ThreadCount count(threads);
  for (const Case& t : cases()) {
    SCOPED_TRACE(::testing::Message() << "m=" << t.m << " n=" << t.n << " k=" << t.k << " at=" << t.a_transposed
                                      << " bt=" << t.b_transposed << " alpha=" << t.alpha << " beta=" << t.beta);
    check_case<float>(t);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace

TEST(CpuSbgemm, Avx512Bf16KernelMatchesTheRoundedReference) {
  if (!has(SbgemmKernel::Avx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  run_all(SbgemmKernel::Avx512Bf16, 1);
}

TEST(CpuSbgemm, AmxKernelMatchesTheRoundedReference) {
  if (!has(SbgemmKernel::Amx)) GTEST_SKIP() << "this CPU (or its OS) has no AMX";
  run_all(SbgemmKernel::Amx, 1);
}

TEST(CpuSbgemm, NativeKernelsOnTwoThreads) {
  for (SbgemmKernel kernel : {SbgemmKernel::Avx512Bf16, SbgemmKernel::Amx}) {
    if (!has(kernel)) continue;
    SCOPED_TRACE(tapegrad::cpu::sbgemm_kernel_name(kernel));
    Path path(kernel);
    ThreadCount count(2);
    // Large enough to be split across threads (more than 2^24 multiply-adds, several panels).
    check_case<float>({64, 200, 300, false, false, 1.0f, 0.0f});
    check_case<float>({40, 130, 520, true, false, 1.0f, 1.0f});
    check_case<float>({96, 256, 1000, false, false, 1.0f, 1.0f});
  }
}

// The cache blocking of the AVX512-BF16 kernel (Note [bf16 blocking]): rows in several blocks of
// 48, depth across a block of 2048, and panels handed to two threads in chunks.
TEST(CpuSbgemm, CacheBlocksOfRowsDepthAndPanels) {
  for (SbgemmKernel kernel : {SbgemmKernel::Avx512Bf16, SbgemmKernel::Amx}) {
    if (!has(kernel)) continue;
    SCOPED_TRACE(tapegrad::cpu::sbgemm_kernel_name(kernel));
    Path path(kernel);
    for (int threads : {1, 2}) {
      ThreadCount count(threads);
      check_case<float>({100, 300, 2100, false, false, 1.0f, 0.0f});
      check_case<float>({61, 200, 2049, true, true, -1.0f, 0.5f});
    }
  }
}

// A bf16 output (RoundedOutput) has the bits of the float32 result rounded by core/half.h: the
// kernels round as they store, in one depth block or after several, with beta reading C.
TEST(CpuSbgemm, RoundedOutputHasTheBitsOfTheRoundedFloatResult) {
  for (SbgemmKernel kernel : kAllKernels) {
    if (!has(kernel)) continue;
    SCOPED_TRACE(tapegrad::cpu::sbgemm_kernel_name(kernel));
    Path path(kernel);
    ThreadCount count(2);
    for (const Case& t : {Case{70, 200, 300, false, false, 1.0f, 0.0f}, Case{61, 100, 2100, false, true, 1.0f, 0.5f},
                          Case{5, 33, 7, true, false, 3.0f, 1.0f}}) {
      SCOPED_TRACE(::testing::Message() << "m=" << t.m << " n=" << t.n << " k=" << t.k);
      const int64_t a_lead = t.a_transposed ? t.m : t.k, b_lead = t.b_transposed ? t.k : t.n;
      const std::vector<float> a = uniform_values<float>(static_cast<size_t>(t.m * t.k), 11);
      const std::vector<float> b = uniform_values<float>(static_cast<size_t>(t.k * t.n), 12);
      const std::vector<float> c0 = uniform_values<float>(static_cast<size_t>(t.m * t.n), 13);
      PackedBf16Matrix packed(b.data(), t.b_transposed ? 1 : b_lead, t.b_transposed ? b_lead : 1, t.k, t.n);
      const int64_t a_rs = t.a_transposed ? 1 : a_lead, a_cs = t.a_transposed ? a_lead : 1;
      std::vector<float> plain = c0, scratch = c0;
      tapegrad::cpu::sbgemm(t.m, t.alpha, a.data(), a_rs, a_cs, packed, t.beta, plain.data(), t.n);
      const int64_t ld16 = t.n + 5;  // padded rows: nothing may be written past column n
      std::vector<BFloat16> out(static_cast<size_t>(t.m * ld16), BFloat16(7.0f));
      tapegrad::cpu::sbgemm(t.m, t.alpha, a.data(), a_rs, a_cs, packed, t.beta, scratch.data(), t.n,
                            tapegrad::cpu::RoundedOutput{out.data(), ld16});
      for (int64_t i = 0; i < t.m; ++i)
        for (int64_t j = 0; j < ld16; ++j) {
          const uint16_t want = j < t.n ? BFloat16(plain[static_cast<size_t>(i * t.n + j)]).bits : BFloat16(7.0f).bits;
          ASSERT_EQ(out[static_cast<size_t>(i * ld16 + j)].bits, want) << "(" << i << ", " << j << ")";
        }
    }
  }
}

TEST(CpuSbgemm, PortablePathMatchesTheRoundedReference) {
  run_all(SbgemmKernel::Portable, 2);
}

TEST(CpuSbgemm, Bf16SourcesGiveTheSameProducts) {
  for (SbgemmKernel kernel : kAllKernels) {
    if (!has(kernel)) continue;
    Path path(kernel);
    check_case<BFloat16>({13, 45, 37, false, false, 1.0f, 0.0f});
    check_case<BFloat16>({13, 45, 37, true, true, 1.0f, 0.5f});
  }
}

// Negative control: the products really are of bf16-rounded operands. Against the unrounded f32
// product they are off by far more than the tolerance above (about 2^-9 relative per operand).
TEST(CpuSbgemm, OperandsAreRoundedToBf16) {
  for (SbgemmKernel kernel : kAllKernels) {
    if (!has(kernel)) continue;
    Path path(kernel);
    const double off = check_case<float>({16, 32, 256, false, false, 1.0f, 0.0f});
    EXPECT_GT(off, 1e-4) << tapegrad::cpu::sbgemm_kernel_name(kernel);
  }
}

// One packed matrix serves many products, as an LSTM's weights serve every step; the two native
// kernels read the same packing.
TEST(CpuSbgemm, PackedMatrixIsReusable) {
  for (SbgemmKernel kernel : kAllKernels) {
    if (!has(kernel)) continue;
    Path path(kernel);
    const int64_t k = 40, n = 48, m = 3;
    std::vector<float> b = uniform_values<float>(static_cast<size_t>(k * n), 7);
    PackedBf16Matrix packed(b.data(), n, 1, k, n);
    EXPECT_EQ(packed.native(), kernel != SbgemmKernel::Portable);
    for (uint32_t step = 0; step < 4; ++step) {
      // Alternate the native kernels over one packing where both exist.
      if (kernel == SbgemmKernel::Amx) tapegrad::cpu::sbgemm_limit_kernel(step % 2 ? SbgemmKernel::Avx512Bf16 : kernel);
      std::vector<float> a = uniform_values<float>(static_cast<size_t>(m * k), 100 + step),
                         c(static_cast<size_t>(m * n));
      tapegrad::cpu::sbgemm(m, 1.0f, a.data(), k, 1, packed, 0.0f, c.data(), n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < k; ++p) want += rounded(a[i * k + p]) * rounded(b[p * n + j]);
          ASSERT_NEAR(c[i * n + j], want, 1e-4) << "step " << step;
        }
    }
  }
}

TEST(CpuSbgemm, EmptyDepthScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  PackedBf16Matrix packed(static_cast<const float*>(nullptr), 2, 1, 0, 2);
  tapegrad::cpu::sbgemm(2, 1.0f, static_cast<const float*>(nullptr), 0, 1, packed, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  tapegrad::cpu::sbgemm(2, 1.0f, static_cast<const float*>(nullptr), 0, 1, packed, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

// Tall, narrow products (few panels, many rows: what a product computed transposed asks for) split
// their rows between the threads instead of their panels, one panel included.
TEST(CpuSbgemm, TallNarrowProductsSplitTheirRows) {
  for (SbgemmKernel kernel : {SbgemmKernel::Avx512Bf16, SbgemmKernel::Amx}) {
    if (!has(kernel)) continue;
    SCOPED_TRACE(tapegrad::cpu::sbgemm_kernel_name(kernel));
    Path path(kernel);
    ThreadCount count(2);
    check_case<float>({512, 64, 1000, false, false, 1.0f, 0.0f});
    check_case<float>({197, 17, 700, false, true, -1.0f, 0.5f});
    check_case<float>({100, 96, 300, true, false, 2.0f, 1.0f});
    check_case<BFloat16>({301, 40, 130, false, true, 1.0f, 0.25f});
  }
}

// Note [shallow products split by rows]: a weight gradient at a small batch (shallow, B in L2)
// is shared by rows of C; the values are checked against the reference and, bit for bit, against
// one thread (the same tiles summed in the same order). The control: a deep product keeps the
// split by panels, and neither split applies to one thread or to too few rows.
TEST(CpuSbgemm, ShallowProductsSplitTheirRows) {
  if (!has(SbgemmKernel::Avx512Bf16)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  // The split belongs to the AVX512-BF16 kernel: chosen here, since a CPU with AMX runs AMX tiles.
  Path path(SbgemmKernel::Avx512Bf16);
  EXPECT_TRUE(tapegrad::cpu::sbgemm_splits_rows(512, 64, 1000, 2));     // mlp_seed's dW at batch 64
  EXPECT_TRUE(tapegrad::cpu::sbgemm_splits_rows(256, 64, 512, 2));      // mlp_fashion's second layer
  EXPECT_FALSE(tapegrad::cpu::sbgemm_splits_rows(512, 1024, 1000, 2));  // at batch 1024: B is 2 MB
  EXPECT_FALSE(tapegrad::cpu::sbgemm_splits_rows(64, 64, 1000, 2));     // too few rows
  EXPECT_FALSE(tapegrad::cpu::sbgemm_splits_rows(512, 64, 1000, 1));
  ThreadCount count(2);
  check_case<float>({512, 1000, 64, true, false, 1.0f, 0.0f});
  check_case<BFloat16>({300, 520, 33, true, false, -1.0f, 1.0f});
  check_case<float>({197, 70, 130, false, true, 2.0f, 0.5f});
  const int64_t m = 300, k = 64, n = 700;
  const std::vector<float> a = uniform_values<float>(static_cast<size_t>(m * k), 31);
  const std::vector<float> b = uniform_values<float>(static_cast<size_t>(k * n), 32);
  ASSERT_TRUE(tapegrad::cpu::sbgemm_splits_rows(m, k, n, 2));
  const PackedBf16Matrix packed(b.data(), n, 1, k, n);
  std::vector<float> two(static_cast<size_t>(m * n)), one(two.size());
  tapegrad::cpu::sbgemm(m, 1.0f, a.data(), 1, m, packed, 0.0f, two.data(), n);  // A read by columns
  {
    ThreadCount serial(1);
    tapegrad::cpu::sbgemm(m, 1.0f, a.data(), 1, m, packed, 0.0f, one.data(), n);
  }
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << "element " << i;
}

// sbgemm_unpacked: where the product is shared by rows every thread packs its own B; the sums are
// those of B packed once, bit for bit, for float32 and bf16 operands and a bf16-rounded output,
// and a slice of rows that is not a whole number of tiles. The control: one thread (no split).
TEST(CpuSbgemm, UnpackedProductsPackBPerThreadWithTheSameBits) {
  if (!has(SbgemmKernel::Avx512Bf16)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  Path path(SbgemmKernel::Avx512Bf16);
  const int64_t m = 301, k = 64, n = 700, ldc = n + 5;
  const std::vector<float> a = uniform_values<float>(static_cast<size_t>(m * k), 41);
  const std::vector<float> b = uniform_values<float>(static_cast<size_t>(k * n), 42);
  const std::vector<BFloat16> a16(a.begin(), a.end()), b16(b.begin(), b.end());
  for (bool bf16_operands : {false, true})
    for (bool bf16_output : {false, true})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message()
                     << (bf16_operands ? "bf16" : "float32") << " operands, " << (bf16_output ? "bf16" : "float32")
                     << " output, " << threads << " threads");
        ThreadCount count(threads);
        EXPECT_EQ(tapegrad::cpu::sbgemm_splits_rows(m, k, n, threads), threads == 2);
        std::vector<float> got(static_cast<size_t>(m * ldc), 0.5f), want = got;
        std::vector<BFloat16> got16(got.size()), want16(got.size());
        tapegrad::cpu::RoundedOutput got_rounded, want_rounded;
        if (bf16_output) got_rounded = {got16.data(), ldc}, want_rounded = {want16.data(), ldc};
        if (bf16_operands) {
          tapegrad::cpu::sbgemm_unpacked(m, k, n, 1.5f, a16.data(), 1, m, b16.data(), n, 1, 1.0f, got.data(), ldc,
                                         got_rounded);
          tapegrad::cpu::sbgemm(m, 1.5f, a16.data(), 1, m, PackedBf16Matrix(b16.data(), n, 1, k, n), 1.0f, want.data(),
                                ldc, want_rounded);
        } else {
          tapegrad::cpu::sbgemm_unpacked(m, k, n, 1.5f, a.data(), 1, m, b.data(), n, 1, 1.0f, got.data(), ldc,
                                         got_rounded);
          tapegrad::cpu::sbgemm(m, 1.5f, a.data(), 1, m, PackedBf16Matrix(b.data(), n, 1, k, n), 1.0f, want.data(), ldc,
                                want_rounded);
        }
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (j >= n) {  // the padding of every row is left alone
              ASSERT_EQ(got[at], 0.5f);
              ASSERT_EQ(got16[at].bits, 0);
            } else if (bf16_output) {
              ASSERT_EQ(got16[at].bits, want16[at].bits) << "C(" << i << ", " << j << ")";
            } else {
              ASSERT_EQ(got[at], want[at]) << "C(" << i << ", " << j << ")";
            }
          }
      }
}

// store_transposed: C = T^T + beta C on every kernel, float32 and bf16 C, shapes off the 16 x 16
// blocks, beta = 0 never reading C (NaN there), nothing written past C's columns.
TEST(CpuSbgemm, StoreTransposedAddsTheTransposeAndRoundsOnce) {
  for (SbgemmKernel kernel : kAllKernels) {
    if (!has(kernel)) continue;
    SCOPED_TRACE(tapegrad::cpu::sbgemm_kernel_name(kernel));
    Path path(kernel);
    for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {5, 37}, {16, 16}, {33, 70}, {64, 512}})
      for (float beta : {0.0f, 1.0f, -0.5f}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " m=" << m << " beta=" << beta);
        const int64_t ldt = n + 2, ldc = m + 3;
        const std::vector<float> t = uniform_values<float>(static_cast<size_t>(m * ldt), 21);
        std::vector<float> c = uniform_values<float>(static_cast<size_t>(n * ldc), 22);
        std::vector<BFloat16> c16(c.begin(), c.end());
        if (beta == 0.0f)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < m; ++j) c[i * ldc + j] = c16[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<float> c_before = c;
        const std::vector<BFloat16> c16_before = c16;
        tapegrad::cpu::store_transposed(t.data(), ldt, n, m, beta, c.data(), nullptr, ldc);
        tapegrad::cpu::store_transposed(t.data(), ldt, n, m, beta, nullptr, c16.data(), ldc);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (j >= m) {
              ASSERT_EQ(c[at], c_before[at]);
              ASSERT_EQ(c16[at].bits, c16_before[at].bits);
              continue;
            }
            const float x = t[static_cast<size_t>(j * ldt + i)];
            const float want = beta == 0.0f ? x : std::fma(beta, c_before[at], x);
            const float want16 = beta == 0.0f ? x : std::fma(beta, static_cast<float>(c16_before[at]), x);
            ASSERT_EQ(c[at], want) << "(" << i << ", " << j << ")";
            ASSERT_EQ(c16[at].bits, BFloat16(want16).bits) << "(" << i << ", " << j << ")";
          }
      }
  }
}

// A small batch times a weight read through .t() (linear's x W^T) is computed as (W x^T)^T on the
// AVX512-BF16 kernel (Note [products computed transposed]). The two orders of the operands multiply
// the same bf16 pairs in the same order, so the result has the bits of the plain product, which a
// contiguous copy of W^T (read by rows, never transposed) gives; float32 and bf16 outputs, with and
// without a bias, and a bf16 batch.
TEST(CpuSbgemm, ProductsComputedTransposedHaveThePlainProductsBits) {
  if (!has(SbgemmKernel::Avx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  using namespace tapegrad;
  Path path(SbgemmKernel::Avx512Bf16);
  ThreadCount count(2);
  // The control: the shapes below do take the transposed path, and the copy does not.
  ASSERT_TRUE(cpu::sbgemm_transposed_is_cheaper(64, 1000, 512, 1, 1000));
  ASSERT_FALSE(cpu::sbgemm_transposed_is_cheaper(64, 1000, 512, 512, 1));
  ASSERT_FALSE(cpu::sbgemm_transposed_is_cheaper(256, 1000, 512, 1, 1000));  // too many rows
  manual_seed(3);
  for (auto [n, k, m] : {std::array<int64_t, 3>{64, 1000, 512}, {7, 701, 97}, {33, 400, 200}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k << " m=" << m);
    ASSERT_TRUE(cpu::sbgemm_transposed_is_cheaper(n, k, m, 1, k));
    const Tensor x = randn({n, k}), w = randn({m, k}), bias = randn({m});
    const Tensor w_t_rows = w.t().contiguous();
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    for (const Tensor& input : {x, x.to(kBFloat16)}) {
      const Tensor transposed = mm(input, w.t()), plain = mm(input, w_t_rows);
      ASSERT_EQ(transposed.dtype(), kBFloat16);
      EXPECT_TRUE(allclose(transposed, plain, 0.0, 0.0));
      EXPECT_TRUE(allclose(linear(input, w, bias), addmm(bias, input, w_t_rows), 0.0, 0.0));
    }
    // A float32 output (a weight gradient's kind): straight, not rounded.
    const Tensor out32 = empty({n, m}), plain32 = empty({n, m});
    cpu::gemm_mixed(x, w.t(), out32, 1.0, 0.0, kBFloat16);
    cpu::gemm_mixed(x, w_t_rows, plain32, 1.0, 0.0, kBFloat16);
    EXPECT_TRUE(allclose(out32, plain32, 0.0, 0.0));
    // beta reads the float32 output it adds to.
    const Tensor c0 = randn({n, m}), with_beta = c0.clone(), plain_beta = c0.clone();
    cpu::gemm_mixed(x, w.t(), with_beta, 2.0, 0.5, kBFloat16);
    cpu::gemm_mixed(x, w_t_rows, plain_beta, 2.0, 0.5, kBFloat16);
    EXPECT_TRUE(allclose(with_beta, plain_beta, 0.0, 0.0));
  }
}

// `bias`: with beta = 0 the product has the bits of beta = 1 over a C holding the bias in every row,
// on every kernel, for float32 and bf16 outputs, products of one and of two depth blocks (2100), a
// last panel of 8 columns, one and two threads (the second splits by panels or by rows). Nothing
// is written past column n, and on the AVX512-BF16 kernel a bf16 output of one depth block leaves
// C, NaN, unread and unwritten. The control: the bias changes the result.
TEST(CpuSbgemm, BiasHasTheBitsOfACHoldingIt) {
  for (SbgemmKernel kernel : kAllKernels) {
    if (!has(kernel)) continue;
    Path path(kernel);
    for (const Case& t : {Case{601, 40, 64, false, false, 1.0f, 0.0f}, Case{70, 200, 300, false, true, 1.0f, 0.0f},
                          Case{29, 72, 2100, false, false, 0.75f, 0.0f}, Case{3, 17, 5, true, false, 1.0f, 0.0f}})
      for (bool bf16_output : {false, true})
        for (int threads : {1, 2}) {
          SCOPED_TRACE(::testing::Message()
                       << tapegrad::cpu::sbgemm_kernel_name(kernel) << " m=" << t.m << " n=" << t.n << " k=" << t.k
                       << (bf16_output ? " bf16" : " float32") << " output, " << threads << " threads");
          ThreadCount count(threads);
          const int64_t ldc = t.n + 3;
          const int64_t a_rs = t.a_transposed ? 1 : t.k, a_cs = t.a_transposed ? t.m : 1;
          const std::vector<float> a = uniform_values<float>(static_cast<size_t>(t.m * t.k), 51);
          const std::vector<float> b = uniform_values<float>(static_cast<size_t>(t.k * t.n), 52);
          const std::vector<float> bias = uniform_values<float>(static_cast<size_t>(t.n), 53);
          const PackedBf16Matrix packed(b.data(), t.b_transposed ? 1 : t.n, t.b_transposed ? t.k : 1, t.k, t.n);
          // Only the AVX512-BF16 kernel adds the bias in its tiles; the others start C from it.
          const bool c_untouched = bf16_output && t.k <= 2048 && kernel == SbgemmKernel::Avx512Bf16;
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> got(static_cast<size_t>(t.m * ldc), c_untouched ? nan : 0.5f);
          std::vector<float> want(got.size(), 0.5f), unbiased(got.size(), 0.5f);
          for (int64_t i = 0; i < t.m; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * ldc);
          std::vector<BFloat16> got16(got.size(), BFloat16(7.0f)), want16 = got16, unbiased16 = got16;
          auto out = [&](std::vector<BFloat16>& o) {
            return bf16_output ? tapegrad::cpu::RoundedOutput{o.data(), ldc} : tapegrad::cpu::RoundedOutput{};
          };
          tapegrad::cpu::sbgemm(t.m, t.alpha, a.data(), a_rs, a_cs, packed, 0.0f, got.data(), ldc, out(got16),
                                bias.data());
          tapegrad::cpu::sbgemm(t.m, t.alpha, a.data(), a_rs, a_cs, packed, 1.0f, want.data(), ldc, out(want16));
          tapegrad::cpu::sbgemm(t.m, t.alpha, a.data(), a_rs, a_cs, packed, 0.0f, unbiased.data(), ldc,
                                out(unbiased16));
          int64_t differs = 0;
          for (int64_t i = 0; i < t.m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const size_t at = static_cast<size_t>(i * ldc + j);
              if (bf16_output) {
                ASSERT_EQ(got16[at].bits, want16[at].bits) << "C(" << i << ", " << j << ")";
                if (c_untouched) ASSERT_TRUE(std::isnan(got[at])) << "C was written at (" << i << ", " << j << ")";
                differs += got16[at].bits != unbiased16[at].bits;
              } else if (j >= t.n) {
                ASSERT_EQ(got[at], 0.5f) << "wrote past column " << t.n;
              } else {
                ASSERT_EQ(got[at], want[at]) << "C(" << i << ", " << j << ")";
                differs += got[at] != unbiased[at];
              }
            }
          EXPECT_GT(differs, t.m * t.n / 2);
        }
  }
}
