// read_idx: parses IDX files through zlib's gzread, which reads gzip and plain files alike.
#include "tapegrad/data/idx.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "tapegrad/ops/creation.h"

namespace tapegrad {
namespace {

using GzFile = std::unique_ptr<gzFile_s, decltype(&gzclose)>;

// Reads up to `count` bytes; returns how many arrived (short only at end of file).
size_t read_some(gzFile file, const std::string& path, uint8_t* out, size_t count) {
  size_t done = 0;
  while (done < count) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(count - done, 1u << 20));
    int got = gzread(file, out + done, chunk);
    if (got < 0) {
      int code = 0;
      TG_CHECK(false, "read_idx: '", path, "' could not be read: ", gzerror(file, &code));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

uint32_t big_endian32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

uint64_t big_endian(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

size_t element_size(uint8_t type) {
  switch (type) {
    case 0x08:
    case 0x09:
      return 1;
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
    default:
      return 0;
  }
}

}  // namespace

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  TG_CHECK(std::filesystem::is_regular_file(path, ec), "read_idx: no such file '", path, "'");
  GzFile file(gzopen(path.c_str(), "rb"), &gzclose);
  TG_CHECK(file != nullptr, "read_idx: cannot open '", path, "'");

  uint8_t head[4];
  size_t got = read_some(file.get(), path, head, 4);
  TG_CHECK(got == 4, "read_idx: '", path, "' is truncated: expected a 4-byte header, got ", got, " bytes");
  TG_CHECK(head[0] == 0 && head[1] == 0, "read_idx: '", path, "' has a bad magic number (first two bytes must be 0)");
  size_t esize = element_size(head[2]);
  TG_CHECK(esize != 0, "read_idx: '", path, "' has unknown type byte 0x", std::hex, int(head[2]));
  int rank = head[3];
  TG_CHECK(rank >= 1 && rank <= 4, "read_idx: '", path, "' has rank ", rank, ", expected 1..4");

  uint8_t dim_bytes[16];
  got = read_some(file.get(), path, dim_bytes, 4 * rank);
  TG_CHECK(got == size_t(4 * rank), "read_idx: '", path, "' is truncated: expected ", 4 * rank, " bytes of dims, got ",
           got);
  Shape dims;
  uint64_t numel = 1;
  // The product of the nonzero dims: a zero dim makes the tensor empty, but the dims after it
  // still set its strides, which must fit in int64 as well.
  uint64_t extent = 1;
  for (int i = 0; i < rank; ++i) {
    uint32_t d = big_endian32(dim_bytes + 4 * i);
    dims.push_back(int64_t(d));
    // Guard the byte count against overflow before comparing it with what the file holds.
    TG_CHECK(d == 0 || extent <= (uint64_t(std::numeric_limits<int64_t>::max()) / esize) / d, "read_idx: '", path,
             "' declares dims too large to address");
    if (d != 0) extent *= d;
    numel *= d;
  }
  uint64_t expected = numel * esize;

  // Grow the buffer only as data arrives, so a huge declared size in a short file allocates nothing big.
  std::vector<uint8_t> data;
  while (data.size() < expected) {
    size_t old = data.size();
    size_t want = size_t(std::min<uint64_t>(expected - old, uint64_t(16) << 20));
    data.resize(old + want);
    size_t n = read_some(file.get(), path, data.data() + old, want);
    data.resize(old + n);
    if (n < want) break;
  }
  TG_CHECK(data.size() == expected, "read_idx: '", path, "' is truncated: expected ", expected, " bytes of data, got ",
           data.size());
  uint8_t extra;
  TG_CHECK(read_some(file.get(), path, &extra, 1) == 0, "read_idx: '", path, "' has trailing bytes after the ",
           expected, " bytes of data");

  uint8_t type = head[2];
  DType dtype = type == 0x0D ? kFloat32 : type == 0x0E ? kFloat64 : kInt32;
  Tensor out = empty(dims, dtype);
  // Typed pointers hoisted out of the loop (data<T>() checks the dtype on every call).
  int32_t* ints = dtype == kInt32 ? out.data<int32_t>() : nullptr;
  float* floats = dtype == kFloat32 ? out.data<float>() : nullptr;
  double* doubles = dtype == kFloat64 ? out.data<double>() : nullptr;
  const uint8_t* p = data.data();
  for (uint64_t i = 0; i < numel; ++i, p += esize) {
    uint64_t bits = big_endian(p, esize);
    switch (type) {
      case 0x08:
        ints[i] = int32_t(uint8_t(bits));
        break;
      case 0x09:
        ints[i] = int32_t(int8_t(uint8_t(bits)));
        break;
      case 0x0B:
        ints[i] = int32_t(int16_t(uint16_t(bits)));
        break;
      case 0x0C:
        ints[i] = int32_t(uint32_t(bits));
        break;
      case 0x0D: {
        uint32_t b = uint32_t(bits);
        float f;
        std::memcpy(&f, &b, 4);
        floats[i] = f;
        break;
      }
      default: {
        double d;
        std::memcpy(&d, &bits, 8);
        doubles[i] = d;
        break;
      }
    }
  }
  return out;
}

}  // namespace tapegrad
