// A safetensors file with many header entries built from raw bytes, for the fuzz target
// fuzz_safetensors_many and test_fuzz_regressions: the entry count (up to 100,000), the entry
// kinds (one-float, empty, duplicate names, nested metadata) and the names' alphabet come from the
// bytes. Parsing such a header must stay fast (libFuzzer's -timeout bounds each input) and load
// or throw tapegrad::Error.
#pragma once

#include <cstdint>
#include <string>

namespace safetensors_many {

inline std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

inline std::string build(const uint8_t* data, size_t size) {
  size_t pos = 0;
  auto next = [&]() -> uint8_t { return pos < size ? data[pos++] : 0; };
  const uint32_t count =
      (static_cast<uint32_t>(next()) | static_cast<uint32_t>(next()) << 8 | static_cast<uint32_t>(next()) << 16) %
      100001;
  const uint8_t mode = next();
  // The rest of the input is the alphabet of the names (kept to JSON-safe characters).
  std::string alphabet;
  while (pos < size && alphabet.size() < 64) {
    const char c = static_cast<char>(next());
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') alphabet += c;
  }
  while (alphabet.size() < 2) alphabet += static_cast<char>('a' + alphabet.size());  // names are numbers in base >= 2
  std::string json = "{";
  std::string bytes;
  uint64_t offset = 0;
  bool first = true;
  if (mode & 1) {
    json += "\"__metadata__\":{\"format\":\"pt\"}";
    first = false;
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (!first) json += ",";
    first = false;
    // Names share long prefixes (the worst case for comparisons); mode bit 2 allows duplicates.
    std::string name(static_cast<size_t>(mode >> 4), alphabet[0]);
    uint32_t k = (mode & 2) ? i / 2 : i;
    do {
      name += alphabet[k % alphabet.size()];
      k /= static_cast<uint32_t>(alphabet.size());
    } while (k > 0);
    const bool empty = (mode & 4) && i % 2 == 0;
    json += "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + (empty ? "0" : "1") + "],\"data_offsets\":[" +
            std::to_string(offset) + "," + std::to_string(offset + (empty ? 0 : 4)) + "]}";
    if (!empty) {
      bytes.append(4, static_cast<char>(i & 0x3f));
      offset += 4;
    }
  }
  json += "}";
  if (mode & 8) bytes.append(1, '\0');  // a tail byte no tensor covers: must be rejected
  return le64(json.size()) + json + bytes;
}

}  // namespace safetensors_many
