// Writes small IDX files (the MNIST format) for tests: big-endian dims and values.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace tapegrad::testing {

inline void put_be32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

// An IDX file of unsigned bytes (type 0x08) with `dims`.
inline void write_idx_u8(const std::string& path, const std::vector<uint32_t>& dims,
                         const std::vector<uint8_t>& values) {
  std::string out = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) put_be32(out, d);
  out.append(values.begin(), values.end());
  std::ofstream(path, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

// An IDX file of int32 values (type 0x0C) with `dims`.
inline void write_idx_i32(const std::string& path, const std::vector<uint32_t>& dims,
                          const std::vector<int32_t>& values) {
  std::string out = {0, 0, 0x0C, static_cast<char>(dims.size())};
  for (uint32_t d : dims) put_be32(out, d);
  for (int32_t v : values) put_be32(out, static_cast<uint32_t>(v));
  std::ofstream(path, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

// An IDX file of float32 values (type 0x0D) with `dims`.
inline void write_idx_f32(const std::string& path, const std::vector<uint32_t>& dims,
                          const std::vector<float>& values) {
  std::string out = {0, 0, 0x0D, static_cast<char>(dims.size())};
  for (uint32_t d : dims) put_be32(out, d);
  for (float f : values) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    put_be32(out, bits);
  }
  std::ofstream(path, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

// A Fashion-MNIST folder (plain IDX bytes under the .gz names; zlib reads both) with `train` and
// `test` images of 28x28 pixels and labels cycling through 0..9.
inline void write_fashion_folder(const std::string& dir, uint32_t train, uint32_t test) {
  for (auto [prefix, n] : {std::pair<const char*, uint32_t>{"train", train}, {"t10k", test}}) {
    std::vector<uint8_t> pixels(static_cast<size_t>(n) * 784), labels(n);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + i / 784 * 11) % 256);
    for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
    write_idx_u8(dir + "/" + prefix + "-images-idx3-ubyte.gz", {n, 28, 28}, pixels);
    write_idx_u8(dir + "/" + prefix + "-labels-idx1-ubyte.gz", {n}, labels);
  }
}

}  // namespace tapegrad::testing
