// The blocked transposes (src/cpu/loops/transpose.h) against an element-by-element reference: 2-,
// 4- and 8-byte elements, shapes on and off the 8 x 8, 16 x 16 and 32 x 32 blocks, leading
// dimensions wider than the matrix (whose padding must be left alone), serial and over the pool.
// The elements are bit patterns, NaN payloads included: a transpose moves bytes, never values.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cpu/loops/transpose.h"
#include "support/thread_count.h"

namespace {

template <class E>
void check(int64_t rows, int64_t cols, bool parallel) {
  const int64_t src_cs = rows + 3, dst_rs = cols + 5;
  std::vector<E> src(static_cast<size_t>(src_cs * cols));
  for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<E>(0x7FC01234u + 2654435761u * k);  // NaN-like bits
  const E fill = static_cast<E>(0x5A5A5A5A5A5A5A5Aull);
  std::vector<E> dst(static_cast<size_t>(dst_rs * rows), fill);
  ASSERT_TRUE(tapegrad::cpu::transpose_2d(src.data(), src_cs, dst.data(), dst_rs, rows, cols, sizeof(E), parallel));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < dst_rs; ++j) {
      const E want = j < cols ? src[static_cast<size_t>(i + j * src_cs)] : fill;
      ASSERT_EQ(dst[static_cast<size_t>(i * dst_rs + j)], want)
          << "(" << i << ", " << j << ") of " << rows << " x " << cols << ", " << sizeof(E) << "-byte elements";
    }
}

TEST(Transpose2d, EveryShapeAndElementSizeMovesEveryElement) {
  tapegrad::testing::ThreadCount threads(2);
  for (int64_t rows : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 70})
    for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 70})
      for (bool parallel : {false, true}) {
        check<uint16_t>(rows, cols, parallel);
        check<uint32_t>(rows, cols, parallel);
        check<uint64_t>(rows, cols, parallel);
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// Large enough for the pool to share the rows (and for every block size at once).
TEST(Transpose2d, LargeMatricesOverThePool) {
  tapegrad::testing::ThreadCount threads(2);
  check<uint32_t>(768, 2048, true);
  check<uint32_t>(1000, 333, true);
}

TEST(Transpose2d, OtherElementSizesAreRefused) {
  std::vector<uint8_t> src(12), dst(12);
  EXPECT_FALSE(tapegrad::cpu::transpose_2d(src.data(), 2, dst.data(), 2, 2, 2, 3, false));
  EXPECT_EQ(dst, std::vector<uint8_t>(12, 0)) << "nothing copied";
}

}  // namespace
