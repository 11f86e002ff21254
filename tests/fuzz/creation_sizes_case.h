// One creation or view op with sizes decoded from raw bytes, for the fuzz target fuzz_creation and
// the property test CreationSizesProperty: an op whose byte count overflows int64 (or exceeds any
// address space) must throw tapegrad::Error before allocating; a small one must succeed with the
// right shape; anything else (a crash, another exception, a wrong shape) is a bug.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace creation_sizes {

// Reads the bytes as little-endian fields, zeros past the end.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t i64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(u8()) << (8 * i);
    return static_cast<int64_t>(v);
  }
  // A size drawn mostly from the edges: 0, 1, small, powers of two near 2^31/2^62, -1, INT64_MIN, any.
  int64_t size() {
    switch (u8() % 8) {
      case 0:
        return u8() % 4;
      case 1:
        return u8();
      case 2:
        return int64_t{1} << (u8() % 63);
      case 3:
        return (int64_t{1} << (u8() % 63)) - 1;
      case 4:
        return -static_cast<int64_t>(u8() % 3) - 1;
      case 5:
        return INT64_MIN;
      case 6:
        return INT64_MAX - (u8() % 4);
      default:
        return i64();
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

enum class Expect { Success, Error, Either };

// What the op must do for `sizes` of `itemsize`-byte elements: succeed when small, throw when the
// sizes are negative or the bytes cannot be counted or could never be allocated, else either
// (a large valid size is not allocated here: the fuzzer limits memory).
inline Expect expect_for(const std::vector<int64_t>& sizes, int64_t itemsize) {
  for (int64_t s : sizes)
    if (s < 0) return Expect::Error;
  bool empty = false;
  for (int64_t s : sizes) empty = empty || s == 0;
  if (empty) {
    // No bytes, but the contiguous strides (the products of the sizes, 0 and 1 counting as 1)
    // must still be int64s.
    __int128 stride = 1;
    for (int64_t s : sizes) {
      stride *= s > 1 ? s : 1;
      if (stride > INT64_MAX) return Expect::Error;
    }
    return Expect::Success;
  }
  __int128 bytes = itemsize;
  for (int64_t s : sizes) {
    bytes *= s;
    if (bytes >= (static_cast<__int128>(1) << 63)) return Expect::Error;
  }
  if (bytes <= (int64_t{1} << 22)) return Expect::Success;  // 4 MiB
  if (bytes > (int64_t{1} << 56)) return Expect::Error;     // more than any address space
  return Expect::Either;
}

// Runs one decoded case; returns "" or what went wrong.
inline std::string run(const uint8_t* data, size_t size) {
  using namespace tapegrad;
  Bytes in(data, size);
  const int op = in.u8() % 9;
  const DType dtypes[] = {kFloat32, kFloat64, kInt32, kInt64};
  const DType dtype = op == 5 || op == 6 ? (in.u8() % 2 ? kFloat32 : kFloat64) : dtypes[in.u8() % 4];
  std::vector<int64_t> sizes(in.u8() % 4);
  for (int64_t& s : sizes) s = in.size();
  Expect expect = expect_for(sizes, static_cast<int64_t>(dtype_size(dtype)));
  if (expect == Expect::Either) return "";  // too big to try under the fuzzer's memory limit
  Shape want = sizes;
  try {
    Tensor t;
    switch (op) {
      case 0:
        t = empty(sizes, dtype);
        break;
      case 1:
        t = zeros(sizes, dtype);
        break;
      case 2:
        t = ones(sizes, dtype);
        break;
      case 3:
        t = full(sizes, 7.0, dtype);
        break;
      case 4:
        t = randint(-5, 5, sizes, dtype);
        break;
      case 5:
        t = rand(sizes, dtype);
        break;
      case 6:
        t = randn(sizes, dtype);
        break;
      case 7: {  // a free view of one element: only the element count must be countable
        if (sizes.empty()) sizes = {1};
        want = sizes;
        if (want.back() == -1) want.back() = 1;  // -1 keeps the input's size in its own dim
        expect = Expect::Success;
        for (int64_t s : want)
          if (s < 0) expect = Expect::Error;
        bool zero = false;
        for (int64_t s : want) zero = zero || s == 0;
        __int128 n = 1;
        for (int64_t s : want) {
          if (zero || expect == Expect::Error) break;
          n *= s;
          if (n > INT64_MAX) expect = Expect::Error;
        }
        t = ones({1}, dtype).expand(sizes);
        break;
      }
      default: {  // arange over [0, n) for the first size (a double, as a caller would pass it)
        const int64_t n = sizes.empty() ? 3 : sizes[0];
        want = {n < 0 ? 0 : n};
        if (n < 0) return "";  // an empty range is an error only for a wrong-way step; not this case
        expect = expect_for({n}, static_cast<int64_t>(dtype_size(dtype)));
        if (expect == Expect::Either) return "";
        // An integer dtype cannot hold values near 2^63 (or 2^31 for int32): those must throw.
        if (dtype == kInt32 && n > (int64_t{1} << 31)) expect = Expect::Error;
        if (expect == Expect::Success) {
          t = arange(static_cast<double>(n), dtype);
          // The double may round n; the count is the rounded one.
          want = {static_cast<int64_t>(static_cast<double>(n))};
        } else {
          t = arange(static_cast<double>(n), dtype);
        }
        break;
      }
    }
    if (expect == Expect::Error) return "op " + std::to_string(op) + " succeeded for sizes " + shape_str(sizes);
    if (t.sizes() != want) return "op " + std::to_string(op) + " gave shape " + shape_str(t.sizes());
  } catch (const Error& e) {
    if (expect == Expect::Success)
      return "op " + std::to_string(op) + " threw for sizes " + shape_str(sizes) + ": " + e.what();
  } catch (const std::exception& e) {
    return "op " + std::to_string(op) + " threw a non-tapegrad exception: " + e.what();
  }
  return "";
}

}  // namespace creation_sizes
