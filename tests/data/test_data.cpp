// Data layer: IDX parsing (plain, gzip, malformed), FashionMNIST, and DataLoader batching/shuffling/prefetch.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/idx_writer.h"
#include "support/test_util.h"
#include "tapegrad/data/dataloader.h"
#include "tapegrad/data/dataset.h"
#include "tapegrad/data/idx.h"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using testing::expect_error;

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / "tapegrad_test_data";
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string write_plain(const std::string& name, const Bytes& bytes) {
  std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

// The test links only tapegrad (zlib is its private dependency), so it writes gzip itself: a gzip
// header, deflate "stored" (uncompressed) blocks, then CRC-32 and length, per RFC 1951/1952.
uint32_t crc32_of(const Bytes& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_le(Bytes& out, uint32_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(uint8_t(v >> (8 * i)));
}

std::string write_gzip(const std::string& name, const Bytes& bytes) {
  Bytes gz = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  size_t pos = 0;
  do {
    size_t len = std::min<size_t>(bytes.size() - pos, 65535);
    bool last = pos + len == bytes.size();
    gz.push_back(last ? 1 : 0);
    put_le(gz, uint32_t(len), 2);
    put_le(gz, uint32_t(~len & 0xFFFF), 2);
    gz.insert(gz.end(), bytes.begin() + long(pos), bytes.begin() + long(pos + len));
    pos += len;
  } while (pos < bytes.size());
  put_le(gz, crc32_of(bytes), 4);
  put_le(gz, uint32_t(bytes.size()), 4);
  return write_plain(name, gz);
}

Bytes header(uint8_t type, const std::vector<uint32_t>& dims) {
  Bytes b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  return b;
}

Bytes images_2x2x3() {
  Bytes b = header(0x08, {2, 2, 3});
  for (int i = 0; i < 12; ++i) b.push_back(uint8_t(i * 20));
  return b;
}

std::vector<int64_t> ints(const Tensor& t) {
  return t.to(kInt64).tolist<int64_t>();
}

TEST(ReadIdx, ParsesPlainAndGzip) {
  for (const std::string& path : {write_plain("a.idx", images_2x2x3()), write_gzip("a.idx.gz", images_2x2x3())}) {
    Tensor t = read_idx(path);
    EXPECT_EQ(t.dtype(), kInt32);
    EXPECT_EQ(t.sizes(), (Shape{2, 2, 3}));
    std::vector<int64_t> expect;
    for (int i = 0; i < 12; ++i) expect.push_back(i * 20);
    EXPECT_EQ(ints(t), expect);
  }
}

TEST(ReadIdx, SignedAndFloatTypes) {
  Bytes b = header(0x0B, {2});
  for (uint8_t x : {0xFF, 0xFE, 0x01, 0x00}) b.push_back(x);  // int16 -2, 256
  EXPECT_EQ(ints(read_idx(write_plain("i16.idx", b))), (std::vector<int64_t>{-2, 256}));
  Bytes f = header(0x0D, {1});
  for (uint8_t x : {0x3F, 0xC0, 0x00, 0x00}) f.push_back(x);  // 1.5f
  Tensor t = read_idx(write_gzip("f32.idx.gz", f));
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_EQ(t.item<float>(), 1.5f);
}

TEST(ReadIdx, MalformedFilesThrow) {
  Bytes truncated = images_2x2x3();
  truncated.resize(truncated.size() - 3);
  for (auto write : {&write_plain, &write_gzip}) {
    std::string p = write("trunc", truncated);
    expect_error([&] { read_idx(p); }, {"read_idx", p, "truncated", "expected 12", "got 9"});
  }
  Bytes bad_magic = images_2x2x3();
  bad_magic[0] = 1;
  expect_error([&] { read_idx(write_plain("magic", bad_magic)); }, {"read_idx", "magic"});
  Bytes bad_type = images_2x2x3();
  bad_type[2] = 0x07;
  expect_error([&] { read_idx(write_plain("type", bad_type)); }, {"read_idx", "type byte"});
  for (uint8_t rank : {0, 5}) {
    Bytes r = images_2x2x3();
    r[3] = rank;
    expect_error([&] { read_idx(write_plain("rank", r)); }, {"read_idx", "rank"});
  }
  expect_error([&] { read_idx(write_plain("empty", {})); }, {"read_idx", "truncated"});
  expect_error([&] { read_idx(write_gzip("empty.gz", {})); }, {"read_idx", "truncated"});
  Bytes trailing = images_2x2x3();
  trailing.push_back(7);
  expect_error([&] { read_idx(write_gzip("trail", trailing)); }, {"read_idx", "trailing"});
  expect_error([&] { read_idx(write_plain("huge1", header(0x08, {0xFFFFFFFF}))); }, {"read_idx", "truncated"});
  expect_error(
      [&] {
        read_idx(write_plain("huge4", header(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF})));
      },
      {"read_idx", "too large"});
  Bytes short_dims = header(0x08, {2, 2, 3});
  short_dims.resize(9);
  expect_error([&] { read_idx(write_plain("dims", short_dims)); }, {"read_idx", "truncated"});
  expect_error([&] { read_idx(temp_path("does_not_exist")); }, {"read_idx", "does_not_exist"});
}

const char* kRoot = "/usr/share/datasets/fashion-mnist";

TEST(FashionMNIST, TrainAndTest) {
  if (!fs::exists(kRoot)) GTEST_SKIP() << kRoot << " is absent";
  FashionMNIST train;
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.images().sizes(), (Shape{60000, 784}));
  EXPECT_EQ(train.images().dtype(), kFloat32);
  EXPECT_EQ(train.labels().dtype(), kInt64);
  EXPECT_GE(train.images().min().item(), 0.0);
  EXPECT_LE(train.images().max().item(), 1.0);
  EXPECT_EQ(train.labels().min().item<int64_t>(), 0);
  EXPECT_EQ(train.labels().max().item<int64_t>(), 9);
  EXPECT_EQ(train.get(0).input.sizes(), (Shape{784}));
  FashionMNIST test(kRoot, false, true);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_NEAR(test.images().mean().item(), 0.0, 0.05);
}

TEST(FashionMNIST, MissingRootThrows) {
  expect_error([] { FashionMNIST("/nonexistent_root"); }, {"read_idx", "/nonexistent_root"});
}

// A zero dim made the overflow guard pass for any later dims: a tensor of 0 x 2^32 x 2^32 x 2^32
// elements, whose strides overflow int64.
TEST(ReadIdx, ZeroDimBeforeHugeDimsIsRefused) {
  const std::string p = write_plain("zero_then_huge", header(0x08, {0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}));
  expect_error([&] { read_idx(p); }, {"read_idx", p, "too large"});
  // A zero dim with modest others is an empty tensor of that shape.
  Tensor empty = read_idx(write_plain("zero_dim", header(0x08, {0, 28, 28})));
  EXPECT_EQ(empty.sizes(), (Shape{0, 28, 28}));
}

// A Fashion-MNIST folder whose files tests then replace one at a time.
class FashionFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("fashion_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    testing::write_fashion_folder(dir_, 4, 2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string images() const { return dir_ + "/train-images-idx3-ubyte.gz"; }
  std::string labels() const { return dir_ + "/train-labels-idx1-ubyte.gz"; }
  std::string dir_;
};

// An IDX image file of int32 (or float) values beyond 0..255 trained on garbage: now the loader
// names the file, the offending pixel's index and its value.
TEST_F(FashionFiles, PixelsOutside0To255AreErrors) {
  std::vector<int32_t> pixels(4 * 784, 7);
  testing::write_idx_i32(images(), {4, 28, 28}, pixels);
  EXPECT_FLOAT_EQ(float(FashionMNIST(dir_).images().max().item()), 7.0f / 255.0f);  // in range: any integer type loads
  pixels[1000] = 300;
  testing::write_idx_i32(images(), {4, 28, 28}, pixels);
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", images(), "pixel 1000", "300", "0..255"});
  pixels[1000] = -1;
  testing::write_idx_i32(images(), {4, 28, 28}, pixels);
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", images(), "pixel 1000", "-1", "0..255"});
  std::vector<float> floats(4 * 784, 0.5f);
  floats[5] = 3e38f;
  testing::write_idx_f32(images(), {4, 28, 28}, floats);
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", images(), "pixel 5", "3e+38", "0..255"});
  floats[5] = -0.25f;
  testing::write_idx_f32(images(), {4, 28, 28}, floats);
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", images(), "pixel 5", "-0.25"});
}

// Labels outside 0..9 and image/label counts that differ (checked before; kept covered here).
TEST_F(FashionFiles, BadLabelsAndCountMismatchAreErrors) {
  testing::write_idx_u8(labels(), {4}, {0, 1, 10, 3});
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", "label 2", labels(), "10", "0..9"});
  testing::write_idx_i32(labels(), {4}, {0, 1, -3, 3});
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", "label 2", "-3"});
  testing::write_idx_u8(labels(), {3}, {0, 1, 2});
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", "4 images", "3 labels"});
  testing::write_idx_u8(labels(), {4, 1}, {0, 1, 2, 3});
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", labels(), "[N]"});
  testing::write_idx_u8(labels(), {4}, {0, 1, 2, 3});
  testing::write_idx_u8(images(), {4, 784}, std::vector<uint8_t>(4 * 784, 1));
  expect_error([&] { FashionMNIST{dir_}; }, {"FashionMNIST", images(), "[N, rows, cols]"});
}

TensorDataset make_dataset(int64_t n) {
  return TensorDataset(arange(0, double(n), 1, kFloat32).reshape({n, 1}) * 2.0, arange(double(n)));
}

std::vector<int64_t> epoch_targets(DataLoader& loader) {
  std::vector<int64_t> out;
  for (const Example& batch : loader) {
    std::vector<int64_t> t = ints(batch.target);
    std::vector<double> x = testing::values(batch.input);
    for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(x[i], 2.0 * double(t[i]));
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

TEST(DataLoader, ShuffledEpochCoversEveryIndexOnce) {
  TensorDataset data = make_dataset(103);
  DataLoader loader(data, {10, true, 7});
  EXPECT_EQ(loader.size(), 11);
  std::vector<int64_t> a = epoch_targets(loader), b = epoch_targets(loader);
  EXPECT_NE(a, b);  // different epochs differ
  for (auto v : {a, b}) {
    std::sort(v.begin(), v.end());
    std::vector<int64_t> all(103);
    for (int64_t i = 0; i < 103; ++i) all[size_t(i)] = i;
    EXPECT_EQ(v, all);
  }
  DataLoader again(data, {10, true, 7});
  EXPECT_EQ(epoch_targets(again), a);  // same seed, same order
}

TEST(DataLoader, BatchSizesAndDropLast) {
  TensorDataset data = make_dataset(10);
  for (bool drop : {false, true}) {
    DataLoader loader(data, {4, false, 0, drop});
    std::vector<int64_t> sizes;
    for (const Example& batch : loader) sizes.push_back(batch.input.size(0));
    EXPECT_EQ(sizes, drop ? std::vector<int64_t>({4, 4}) : std::vector<int64_t>({4, 4, 2}));
    EXPECT_EQ(int64_t(sizes.size()), loader.size());
  }
  expect_error([&] { DataLoader(data, {0}); }, {"DataLoader", "batch_size"});
}

TEST(DataLoader, PrefetchMatchesSynchronous) {
  TensorDataset data = make_dataset(57);
  DataLoader on(data, {8, true, 3, false, true}), off(data, {8, true, 3, false, false});
  for (int e = 0; e < 3; ++e) EXPECT_EQ(epoch_targets(on), epoch_targets(off));
}

// A dataset whose generic get() path is used (default get_batch) and which fails on one index.
class Failing : public Dataset {
 public:
  int64_t size() const override { return 20; }
  Example get(int64_t i) const override {
    TG_CHECK(i != 13, "Failing::get: bad index ", i);
    return {scalar_tensor(double(i)), scalar_tensor(double(i), kInt64)};
  }
};

TEST(DataLoader, WorkerErrorsAreRethrownAndEarlyBreakJoins) {
  Failing data;
  DataLoader loader(data, {4});
  int seen = 0;
  expect_error(
      [&] {
        for (const Example& batch : loader) {
          EXPECT_EQ(batch.input.size(0), 4);
          ++seen;
        }
      },
      {"Failing::get", "13"});
  EXPECT_EQ(seen, 3);
  {
    TensorDataset big = make_dataset(1000);
    DataLoader early(big, {5, true, 1});
    for (const Example& batch : early) {
      (void)batch;
      break;  // the worker is blocked on a full slot; destroying the iterator must stop it
    }
  }
  SUCCEED();
}

}  // namespace
}  // namespace tapegrad
