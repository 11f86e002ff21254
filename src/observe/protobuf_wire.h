// The few pieces of the protobuf wire format that an Event with scalar summaries needs:
// varints, 64- and 32-bit fixed fields, and length-delimited fields, appended to a byte string.
// Field numbers: tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace tapegrad::observe::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

inline void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

inline void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}

inline void put_little_endian(std::string& out, uint64_t bits, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((bits >> (8 * i)) & 0xFF);
}

inline void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

inline void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

// int64 fields are varints of the two's-complement value (ten bytes when negative).
inline void put_int64(std::string& out, uint32_t field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

inline void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace tapegrad::observe::wire
