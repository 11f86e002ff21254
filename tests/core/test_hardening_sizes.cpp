// Sizes from a hostile or careless caller: every size product is checked, negative sizes are
// errors, float-to-integer conversions are range-checked, and running out of memory names the op
// and the bytes. Nothing here may allocate much: each case must fail before it does.
#include <new>

#include "backend/kernel_table.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

constexpr int64_t k2e61 = int64_t{1} << 61;
constexpr int64_t k2e62 = int64_t{1} << 62;

// Issue 16, item 3: numel * itemsize wrapped to a tiny allocation that the fill overran.
TEST(HardeningSizes, CreationOpsRejectByteCountsPastInt64) {
  expect_error([] { ones({k2e62}); }, {"ones", "[4611686018427387904]", "2^63 bytes"});
  expect_error([] { zeros({k2e62}); }, {"zeros", "2^63 bytes"});
  expect_error([] { full({k2e62}, 2.0); }, {"full", "2^63 bytes"});
  expect_error([] { randn({k2e62}); }, {"randn", "2^63 bytes"});
  expect_error([] { rand({2, k2e62}); }, {"rand"});
  expect_error([] { empty({k2e61}, kFloat64); }, {"empty", "2^63 bytes"});
  expect_error([] { randint(0, 10, {k2e62}, kInt64); }, {"randint"});
  expect_error([] { linspace(0, 1, k2e62); }, {"linspace"});
  // mlp_seed --batch-size 4611686018427388 reached this through randn({batch, 1000}).
  expect_error([] { randn({4611686018427388, 1000}); }, {"randn"});
}

TEST(HardeningSizes, ElementCountOverflowIsAnError) {
  expect_error([] { ones({k2e62, 4}); }, {"ones", "more elements than int64"});
  expect_error([] { empty({int64_t{1} << 32, int64_t{1} << 32}); }, {"empty", "more elements than int64"});
}

TEST(HardeningSizes, LinearWithAHugeWidthIsAnError) {
  expect_error([] { nn::Linear(784, 5882252574524730); }, {"2^63 bytes"});
}

TEST(HardeningSizes, NegativeSizesAreErrors) {
  expect_error([] { empty({-1}); }, {"empty", "negative size", "[-1]"});
  expect_error([] { ones({2, -3}); }, {"ones", "negative size"});
  float buffer[4] = {};
  expect_error([&] { from_blob(buffer, {-2, -2}, kFloat32); }, {"from_blob", "negative size"});
  expect_error([&] { from_blob(buffer, {-1}, kFloat32); }, {"from_blob", "negative size"});
  Tensor one = ones({1});
  expect_error([&] { one.expand({-2}); }, {"expand", "negative size -2"});
  expect_error([&] { one.expand({3, -5}); }, {"expand", "negative size"});
}

TEST(HardeningSizes, FromBlobRejectsByteOverflow) {
  float buffer[4] = {};
  expect_error([&] { from_blob(buffer, {k2e62}, kFloat32); }, {"from_blob", "2^63 bytes"});
  expect_error([&] { from_blob(nullptr, {4}, kFloat32); }, {"from_blob", "null data pointer"});
}

TEST(HardeningSizes, ExpandWhoseElementCountOverflowsIsAnError) {
  Tensor one = ones({1, 1});
  expect_error([&] { one.expand({k2e62, 4}); }, {"expand", "more elements than int64"});
  // A large but countable expansion stays a free view.
  Tensor wide = one.expand({k2e61, 2});
  EXPECT_EQ(wide.numel(), k2e62);
}

TEST(HardeningSizes, ViewWhoseSizeProductOverflowsIsAnError) {
  Tensor t = ones({4});
  expect_error([&] { t.view({int64_t{1} << 32, int64_t{1} << 32, 4}); }, {"view", "invalid for an input of 4"});
  expect_error([&] { t.reshape({int64_t{1} << 40, int64_t{1} << 40, -1}); }, {"reshape"});
  // An empty tensor may take large sizes beside a zero.
  EXPECT_EQ(zeros({0}).view({int64_t{1} << 40, 0, int64_t{1} << 20}).numel(), 0);
}

TEST(HardeningSizes, ArangeCountsAndIntegerRangesAreChecked) {
  // 2^61 float32 elements are 2^63 bytes.
  expect_error([] { arange(0, 2305843009213693952.0); }, {"arange", "2^63 bytes"});
  expect_error([] { arange(0, 1e19); }, {"arange", "more than int64 can count"});
  expect_error([] { arange(-1e308, 1e308, 1.0); }, {"arange"});
  expect_error([] { arange(0, 5e9, 1e9, kInt32); }, {"arange", "does not fit in int32"});
  expect_error([] { arange(-3e9, 0, 1e9, kInt32); }, {"arange", "does not fit in int32"});
  expect_error([] { arange(0, 1e20, 1e19, kInt64); }, {"arange", "does not fit in int64"});
  EXPECT_EQ(arange(0, 4e9, 1e9, kInt64).tolist<int64_t>(),
            (std::vector<int64_t>{0, 1000000000, 2000000000, 3000000000}));
}

TEST(HardeningSizes, IntegerFillsAreRangeChecked) {
  expect_error([] { full({2}, 1e30, kInt32); }, {"full", "does not fit in int32"});
  expect_error([] { full({2}, std::nan(""), kInt64); }, {"full", "does not fit in int64"});
  expect_error([] { full({2}, 9.3e18, kInt64); }, {"full", "does not fit in int64"});
  expect_error([] { linspace(0, 3e9, 4, kInt32); }, {"linspace", "does not fit in int32"});
  expect_error([] { randint(0, int64_t{1} << 40, {2}, kInt32); }, {"randint", "does not fit in int32"});
  expect_error([] { randint(INT64_MIN, INT64_MAX, {2}, kInt64); }, {"randint", "more values than int64"});
  EXPECT_EQ(full({1}, -2147483648.0, kInt32).item<int32_t>(), INT32_MIN);
}

// Beyond the issue: the public Tensor(storage, ...) constructor accepted any geometry, so a view
// could reach past its storage.
TEST(HardeningSizes, TensorViewMustFitItsStorage) {
  Tensor base = ones({4});
  const std::shared_ptr<Storage>& storage = base.storage();
  expect_error([&] { Tensor(storage, 0, {1000}, {1}, kFloat32); }, {"Tensor", "reaches past its storage of 16 bytes"});
  expect_error([&] { Tensor(storage, 1, {4}, {1}, kFloat32); }, {"reaches past"});
  expect_error([&] { Tensor(storage, 0, {4}, {1}, kFloat64); }, {"reaches past"});
  expect_error([&] { Tensor(storage, 0, {2, 2}, {INT64_MAX, 1}, kFloat32); }, {"reaches past"});
  expect_error([&] { Tensor(storage, -1, {1}, {1}, kFloat32); }, {"negative storage offset"});
  expect_error([&] { Tensor(storage, 0, {-1}, {1}, kFloat32); }, {"negative size"});
  expect_error([&] { Tensor(storage, 0, {2}, {-1}, kFloat32); }, {"negative stride"});
  expect_error([&] { Tensor(storage, 0, {2}, {1, 1}, kFloat32); }, {"sizes but"});
  // Whole, partial, broadcast (stride 0) and empty views are fine.
  EXPECT_EQ(Tensor(storage, 0, {2, 2}, {2, 1}, kFloat32).sum().item(), 4.0);
  EXPECT_EQ(Tensor(storage, 3, {1000}, {0}, kFloat32).sum().item(), 1000.0);
  EXPECT_EQ(Tensor(storage, 4, {0, 5}, {5, 1}, kFloat32).numel(), 0);
}

// Beyond the issue: slice's element count and stride and narrow's bound were computed with
// arithmetic that overflowed for large steps and lengths.
TEST(HardeningSizes, SliceAndNarrowArithmeticDoesNotOverflow) {
  Tensor t = arange(10.0, kFloat32);
  Tensor one = t.slice(0, 2, 10, INT64_MAX);
  EXPECT_EQ(one.sizes(), Shape{1});
  EXPECT_EQ(one.item(), 2.0);
  EXPECT_EQ(t.slice(0, 0, INT64_MAX, 3).tolist<float>(), (std::vector<float>{0, 3, 6, 9}));
  EXPECT_EQ(t.slice(0, INT64_MIN, INT64_MAX).numel(), 10);
  expect_error([&] { t.narrow(0, 5, INT64_MAX); }, {"narrow", "exceed"});
  expect_error([&] { t.narrow(0, INT64_MAX, 1); }, {"narrow"});
}

// Beyond the issue: cat, split and chunk summed sizes with signed overflow.
TEST(HardeningSizes, JoinAndSplitSizeSumsDoNotOverflow) {
  Tensor huge = ones({1}).expand({k2e62});
  expect_error([&] { cat({huge, huge, huge}); }, {"cat", "more than int64"});
  Tensor t = arange(10.0, kFloat32);
  expect_error([&] { split(t, {INT64_MAX, INT64_MAX, 12}); }, {"split", "more than int64"});
  EXPECT_EQ(chunk(t, INT64_MAX).size(), 10u);
  EXPECT_EQ(split(t, INT64_MAX).size(), 1u);
  EXPECT_EQ(split(huge, k2e62 - 1).size(), 2u);
}

// An allocator that reports exhaustion the C++ way.
class ThrowingAllocator : public Allocator {
 public:
  DataPtr allocate(size_t, Device) override { throw std::bad_alloc(); }
};

// Issue 16, item 8: std::bad_alloc from a tensor allocation becomes tapegrad's out-of-memory error.
TEST(HardeningSizes, BadAllocBecomesAnOutOfMemoryErrorNamingTheOpAndBytes) {
  ThrowingAllocator throwing;
  (void)backend::kernels(DeviceKind::CPU);  // registers the backends first, so the swap below sticks
  backend::KernelTable& table = backend::mutable_kernels(DeviceKind::CPU);
  Allocator* saved = table.allocator;
  table.allocator = &throwing;
  try {
    expect_error([] { zeros({1000, 1000}); }, {"zeros", "out of memory", "4000000 bytes", "[1000, 1000]"});
    expect_error([] { randn({3}); }, {"randn", "out of memory", "12 bytes"});
  } catch (...) {
    table.allocator = saved;
    throw;
  }
  table.allocator = saved;
}

// The allocator's own out-of-memory error gains the op and the shape.
TEST(HardeningSizes, AllocatorOutOfMemoryNamesTheOp) {
  // 2^62 bytes: countable, but no machine has it.
  expect_error([] { empty({int64_t{1} << 60}, kFloat32); }, {"empty", "out of memory", "[1152921504606846976]"});
}

}  // namespace
}  // namespace tapegrad
