// safetensors checkpoints: round trips, the exact bytes on disk, a golden file in the reference
// layout, and hostile files that must fail with a clear Error instead of crashing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "tapegrad/io/safetensors.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::values;
namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("tapegrad_st_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file with header `json` (unpadded) followed by `data`.
std::string file_bytes(const std::string& json, const std::string& data) {
  return le64(json.size()) + json + data;
}

std::string f32_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TEST_F(Safetensors, RoundTripsEveryDtypeAndKeepsOrder) {
  Tensor f32 = tensor<float>({1.5f, -2.f, 3.25f, 4.f, 5.f, 6.f}, {2, 3});
  Tensor f64 = tensor<double>({1e-300, 2.5, -3.0}, {3});
  Tensor i64 = tensor<int64_t>({int64_t(1) << 40, -7}, {2, 1});
  Tensor i32 = tensor<int32_t>({-1, 2, 2147483647}, {3});
  Tensor b = gt(tensor<float>({1.f, -1.f, 2.f, 0.f}, {2, 2}), 0.0);
  Tensor f16 = tensor<float>({0.5f, -1.f, 65504.f}, {3}).to(kFloat16);
  Tensor bf16 = tensor<float>({1.f, -2.f, 256.f, 0.125f}, {1, 4}).to(kBFloat16);
  Tensor scalar = scalar_tensor(42.0, kFloat32);  // 0-dim
  Tensor empty0 = zeros({0, 3}, kFloat32);        // no elements
  Tensor empty1 = zeros({0}, kInt64);
  StateDict in = {{"z.f32", f32}, {"a.f64", f64}, {"i64", i64},       {"i32", i32},       {"mask", b},
                  {"half", f16},  {"bf16", bf16}, {"scalar", scalar}, {"empty0", empty0}, {"empty1", empty1}};
  std::string p = path("all.safetensors");
  save_safetensors(p, in);
  StateDict out = load_safetensors(p);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].first);
    EXPECT_EQ(out[i].first, in[i].first);  // saved order, not alphabetical
    EXPECT_EQ(out[i].second.dtype(), in[i].second.dtype());
    EXPECT_EQ(out[i].second.sizes(), in[i].second.sizes());
    EXPECT_EQ(values(out[i].second), values(in[i].second));
  }
  EXPECT_EQ(out[7].second.dim(), 0);
  EXPECT_EQ(out[7].second.item(), 42.0);
}

TEST_F(Safetensors, NonContiguousInputsSaveTheirLogicalValues) {
  Tensor m = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = m.t();  // [[1, 4], [2, 5], [3, 6]]
  ASSERT_FALSE(t.is_contiguous());
  Tensor sliced = tensor<double>({0, 1, 2, 3, 4, 5, 6, 7}, {8}).slice(0, 1, 8, 3);  // 1, 4, 7
  std::string p = path("views.safetensors");
  save_safetensors(p, {{"t", t}, {"s", sliced}});
  StateDict out = load_safetensors(p);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].second.sizes(), (Shape{3, 2}));
  expect_close(out[0].second, {1, 4, 2, 5, 3, 6});
  expect_close(out[1].second, {1, 4, 7});
}

TEST_F(Safetensors, MetadataRoundTrips) {
  std::string p = path("meta.safetensors");
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "1200"}, {"note", "h\u00e9llo \"quoted\""}};
  save_safetensors(p, {{"w", ones({2})}}, meta);
  EXPECT_EQ(load_safetensors_metadata(p), meta);
  EXPECT_EQ(load_safetensors(p).size(), 1u);  // metadata is not a tensor

  std::string q = path("nometa.safetensors");
  save_safetensors(q, {{"w", ones({2})}});
  EXPECT_TRUE(load_safetensors_metadata(q).empty());
  EXPECT_EQ(read_bytes(q).find("__metadata__"), std::string::npos);  // omitted when empty
}

TEST_F(Safetensors, BytesOnDiskFollowTheSpec) {
  std::string p = path("tiny.safetensors");
  save_safetensors(p, {{"a", tensor<int32_t>({1, -2}, {2})}, {"b", scalar_tensor(1.0, kFloat64)}}, {{"k", "v"}});
  std::string bytes = read_bytes(p);
  const std::string json = R"({"__metadata__":{"k":"v"},"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F64","shape":[],"data_offsets":[8,16]}})";
  std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  ASSERT_EQ(padded.size() % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + padded.size() + 16);
  EXPECT_EQ(bytes.substr(0, 8), le64(padded.size()));
  EXPECT_EQ(bytes.substr(8, padded.size()), padded);
  // Little-endian data: int32 1, int32 -2, then double 1.0 (0x3FF0000000000000).
  const unsigned char expected[16] = {1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
  EXPECT_EQ(bytes.substr(8 + padded.size()), std::string(reinterpret_cast<const char*>(expected), 16));
}

TEST_F(Safetensors, SaveGoesThroughATemporaryFileAndReplaces) {
  std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"w", full({3}, 1.0)}});
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  save_safetensors(p, {{"v", full({2}, 7.0, kFloat64)}});
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  StateDict out = load_safetensors(p);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, "v");
  expect_close(out[0].second, {7, 7});

  // A failed save (bad argument) leaves the previous checkpoint untouched and no temporary file.
  std::string before = read_bytes(p);
  expect_error(
      [&] {
        save_safetensors(p, {{"x", ones({1})}, {"x", ones({1})}});
      },
      {"save_safetensors", "duplicate", "'x'"});
  expect_error([&] { save_safetensors(p, {{"u", Tensor()}}); }, {"save_safetensors", "undefined"});
  expect_error([&] { save_safetensors(p, {{"__metadata__", ones({1})}}); }, {"save_safetensors", "reserved"});
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  expect_error(
      [&] {
        save_safetensors(path("no/such/dir/x.safetensors"), {{"w", ones({1})}});
      },
      {"save_safetensors", "cannot create"});
}

// The bytes Python's `safetensors.torch.save_file({"weight": torch.tensor([[1., 2.], [3., 4.]])})`
// writes: compact JSON padded with spaces to a multiple of 8, then the raw little-endian floats.
TEST_F(Safetensors, LoadsAGoldenFileInTheReferenceLayout) {
  const std::string json = R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  ASSERT_EQ(json.size(), 62u);
  std::string header = json + "  ";  // padded 62 -> 64
  const unsigned char data[16] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40};
  std::string golden = le64(64) + header + std::string(reinterpret_cast<const char*>(data), 16);
  std::string p = path("golden.safetensors");
  write_bytes(p, golden);
  StateDict out = load_safetensors(p);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, "weight");
  EXPECT_EQ(out[0].second.dtype(), kFloat32);
  EXPECT_EQ(out[0].second.sizes(), (Shape{2, 2}));
  EXPECT_EQ(out[0].second.tolist<float>(), (std::vector<float>{1, 2, 3, 4}));

  // Our writer produces exactly the same bytes.
  std::string q = path("ours.safetensors");
  save_safetensors(q, {{"weight", tensor<float>({1, 2, 3, 4}, {2, 2})}});
  EXPECT_EQ(read_bytes(q), golden);
}

TEST_F(Safetensors, LoadsToARequestedDeviceOrFailsClearly) {
  std::string p = path("dev.safetensors");
  save_safetensors(p, {{"w", ones({2})}});
  if (cuda::is_available()) {
    StateDict out = load_safetensors(p, kCUDA);
    EXPECT_EQ(out[0].second.device(), kCUDA);
    expect_close(out[0].second.cpu(), {1, 1});
  } else {
    EXPECT_THROW(load_safetensors(p, kCUDA), Error);
  }
}

TEST_F(Safetensors, BoolBytesAreNormalised) {
  std::string json = R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  std::string p = path("bool.safetensors");
  write_bytes(p, file_bytes(json, std::string("\x00\x07\x01", 3)));
  StateDict out = load_safetensors(p);
  EXPECT_EQ(values(out[0].second), (std::vector<double>{0, 1, 1}));
}

// ---- Hostile files ------------------------------------------------------------------------------

struct BadFile {
  const char* what;
  std::string bytes;
  std::vector<std::string> fragments;
};

TEST_F(Safetensors, RejectsMalformedFilesWithUsefulErrors) {
  const std::string d16 = f32_bytes({1, 2, 3, 4});
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  const std::string good = "{" + entry("w", "F32", "[2,2]", "[0,16]") + "}";
  std::vector<BadFile> cases = {
      {"empty file", "", {"truncated", "shorter than the 8-byte"}},
      {"truncated length", std::string("\x10\x00\x00", 3), {"truncated"}},
      {"header longer than file", le64(1000) + good + d16, {"header length 1000", "past the end"}},
      {"absurd header length", le64(uint64_t(1) << 62) + good, {"header length", "limit"}},
      {"huge header length", le64(~uint64_t(0)), {"header length"}},
      {"header truncated mid-file", file_bytes(good, d16).substr(0, 30), {"header length", "past the end"}},
      {"not JSON", file_bytes("{not json", ""), {"not valid JSON"}},
      {"invalid UTF-8", file_bytes("{\"\xff\":1}", ""), {"not valid JSON"}},
      {"JSON array", file_bytes("[1,2,3]", ""), {"must be a JSON object", "array"}},
      {"entry not an object", file_bytes(R"({"w":[0,16]})", d16), {"'w'", "must be an object"}},
      {"missing dtype", file_bytes(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", d16), {"'w'", "lacks 'dtype'"}},
      {"missing shape", file_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,16]}})", d16), {"lacks 'shape'"}},
      {"missing offsets", file_bytes(R"({"w":{"dtype":"F32","shape":[4]}})", d16), {"lacks 'data_offsets'"}},
      {"bad dtype",
       file_bytes("{" + entry("w", "F8_E4M3", "[16]", "[0,16]") + "}", d16),
       {"unsupported dtype 'F8_E4M3'"}},
      {"dtype not a string",
       file_bytes(R"({"w":{"dtype":5,"shape":[4],"data_offsets":[0,16]}})", d16),
       {"dtype must be a string"}},
      {"negative shape", file_bytes("{" + entry("w", "F32", "[-2,-2]", "[0,16]") + "}", d16), {"shape[0]", "negative"}},
      {"float shape",
       file_bytes("{" + entry("w", "F32", "[2.0,2]", "[0,16]") + "}", d16),
       {"shape[0]", "non-negative integer"}},
      {"shape not an array", file_bytes("{" + entry("w", "F32", "4", "[0,16]") + "}", d16), {"shape must be an array"}},
      {"shape that wraps to zero",
       file_bytes("{" + entry("w", "F32", "[4294967296,4294967296]", "[0,0]") + "}", ""),
       {"too large"}},
      {"overflowing shape",
       file_bytes("{" + entry("w", "F32", "[4294967296,4294967296,16]", "[0,16]") + "}", d16),
       {"too large"}},
      {"offsets of wrong arity",
       file_bytes("{" + entry("w", "F32", "[4]", "[0]") + "}", d16),
       {"data_offsets must be an array"}},
      {"negative offset",
       file_bytes("{" + entry("w", "F32", "[0]", "[-4,-4]") + "}", d16),
       {"data_offsets[0]", "negative"}},
      {"begin after end", file_bytes("{" + entry("w", "F32", "[0]", "[16,0]") + "}", d16), {"begin 16 > end 0"}},
      {"size mismatch",
       file_bytes("{" + entry("w", "F32", "[3]", "[0,16]") + "}", d16),
       {"size mismatch", "needs 12 bytes", "span 16"}},
      {"offsets past the data",
       file_bytes("{" + entry("w", "F32", "[8]", "[0,32]") + "}", d16),
       {"'w'", "past the data section"}},
      {"huge offsets",
       file_bytes("{" + entry("w", "F32", "[1]", "[18446744073709551612,18446744073709551616]") + "}", d16),
       {"data_offsets[1]"}},
      {"overlapping tensors",
       file_bytes("{" + entry("a", "F32", "[3]", "[0,12]") + "," + entry("b", "F32", "[2]", "[8,16]") + "}", d16),
       {"'a'", "'b'", "overlap"}},
      {"same region twice",
       file_bytes("{" + entry("a", "F32", "[4]", "[0,16]") + "," + entry("b", "F32", "[4]", "[0,16]") + "}", d16),
       {"overlap"}},
      {"hole", file_bytes("{" + entry("a", "F32", "[2]", "[8,16]") + "}", d16), {"hole", "[0, 8)"}},
      {"trailing bytes", file_bytes(good, d16 + "xxxx"), {"20 bytes", "cover only 16"}},
      {"duplicate keys",
       file_bytes("{" + entry("w", "F32", "[2]", "[0,8]") + "," + entry("w", "F32", "[2]", "[8,16]") + "}", d16),
       {"duplicate key 'w'"}},
      {"metadata not strings",
       file_bytes(R"({"__metadata__":{"step":3},)" + good.substr(1), d16),
       {"__metadata__", "'step'", "string"}},
      {"metadata not an object",
       file_bytes(R"({"__metadata__":"x",)" + good.substr(1), d16),
       {"__metadata__ must be an object"}},
  };
  std::string p = path("bad.safetensors");
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    write_bytes(p, c.bytes);
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back("load_safetensors: " + p + ": ");  // every message names the function and file
    expect_error([&] { load_safetensors(p); }, fragments);
  }
  // The metadata reader validates the same way and names itself.
  write_bytes(p, file_bytes("[]", ""));
  expect_error([&] { load_safetensors_metadata(p); }, {"load_safetensors_metadata: ", "must be a JSON object"});
  expect_error([&] { load_safetensors(path("missing.safetensors")); },
               {"load_safetensors", "missing.safetensors", "cannot open"});
}

TEST_F(Safetensors, AcceptsOddButValidFiles) {
  // An empty file body (no tensors), whitespace padding of any length, and unknown entry fields.
  std::string p = path("odd.safetensors");
  write_bytes(p, file_bytes("{}", ""));
  EXPECT_TRUE(load_safetensors(p).empty());
  write_bytes(p, file_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}}   )",
                            f32_bytes({1, 2, 3, 4})));
  StateDict out = load_safetensors(p);
  ASSERT_EQ(out.size(), 1u);
  expect_close(out[0].second, {1, 2, 3, 4});
  // Header order differs from data order: loading follows the data offsets.
  write_bytes(
      p,
      file_bytes(
          R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
          f32_bytes({1, 2})));
  out = load_safetensors(p);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, "a");
  EXPECT_EQ(out[1].first, "b");
}

}  // namespace
}  // namespace tapegrad
