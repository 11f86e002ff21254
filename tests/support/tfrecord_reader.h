// An independent reader of TensorBoard event files for tests: the CRC-32C bit by bit (no table),
// the TFRecord framing, and the protobuf fields of Event, Summary and Summary.Value.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tapegrad::testing::tfrecord {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline uint32_t crc32c_bitwise(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
inline uint32_t masked(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline uint64_t little_endian(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes.at(at + static_cast<size_t>(i)));
  return v;
}

// The records of a TFRecord file; throws std::runtime_error on a bad length or CRC.
inline std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    if (file.size() - at < 12) throw std::runtime_error("truncated header");
    const std::string length_bytes = file.substr(at, 8);
    const uint64_t length = little_endian(file, at, 8);
    if (little_endian(file, at + 8, 4) != masked(crc32c_bitwise(length_bytes))) throw std::runtime_error("length crc");
    if (file.size() - at - 12 < length + 4) throw std::runtime_error("truncated data");
    const std::string data = file.substr(at + 12, length);
    if (little_endian(file, at + 12 + length, 4) != masked(crc32c_bitwise(data))) throw std::runtime_error("data crc");
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

struct Field {
  uint32_t number, type;
  uint64_t integer = 0;  // varint, fixed64, fixed32 bits
  std::string bytes;     // length-delimited
};

inline uint64_t varint(const std::string& b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(b.at(at++));
    v |= uint64_t{byte & 0x7Fu} << shift;
    if (!(byte & 0x80)) return v;
  }
}

inline std::vector<Field> fields(const std::string& message) {
  std::vector<Field> out;
  size_t at = 0;
  while (at < message.size()) {
    const uint64_t key = varint(message, at);
    Field f{static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7)};
    if (f.type == 0)
      f.integer = varint(message, at);
    else if (f.type == 1)
      f.integer = little_endian(message, at, 8), at += 8;
    else if (f.type == 5)
      f.integer = little_endian(message, at, 4), at += 4;
    else if (f.type == 2) {
      const uint64_t n = varint(message, at);
      f.bytes = message.substr(at, n);
      at += n;
    } else
      throw std::runtime_error("unexpected wire type");
    out.push_back(f);
  }
  return out;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

inline Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : fields(data)) {
    if (f.number == 1 && f.type == 1)
      std::memcpy(&e.wall_time, &f.integer, 8);
    else if (f.number == 2 && f.type == 0)
      e.step = static_cast<int64_t>(f.integer);
    else if (f.number == 3 && f.type == 2)
      e.file_version = f.bytes;
    else if (f.number == 5 && f.type == 2) {
      for (const Field& value : fields(f.bytes)) {
        EXPECT_EQ(value.number, 1u);  // Summary.value
        std::string tag;
        float simple = NAN;
        for (const Field& vf : fields(value.bytes)) {
          if (vf.number == 1 && vf.type == 2) tag = vf.bytes;
          if (vf.number == 2 && vf.type == 5) {
            const auto bits = static_cast<uint32_t>(vf.integer);
            std::memcpy(&simple, &bits, 4);
          }
        }
        e.values.emplace_back(tag, simple);
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number;
    }
  }
  return e;
}

inline std::vector<Event> read_events(const std::string& path) {
  std::vector<Event> events;
  for (const std::string& r : read_records(read_file(path))) events.push_back(decode_event(r));
  return events;
}

}  // namespace tapegrad::testing::tfrecord
