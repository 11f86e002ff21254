// UTF-8 decoding and encoding for the text data layer (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF), kept internal so that the checks live in one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tapegrad::detail {

// Decodes the code point starting at text[pos] and advances pos past it. Returns -1 (pos
// unchanged) when the bytes there are not a valid, shortest-form UTF-8 sequence.
inline int64_t utf8_next(std::string_view text, size_t& pos) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  uint8_t b0 = byte(pos);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  int extra;
  uint32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    extra = 1, cp = b0 & 0x1Fu, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, cp = b0 & 0x0Fu, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return -1;  // a continuation byte or 0xF8..0xFF where a sequence should start
  }
  if (pos + size_t(extra) >= text.size()) return -1;  // truncated at the end of the text
  for (int k = 1; k <= extra; ++k) {
    uint8_t b = byte(pos + size_t(k));
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  pos += size_t(extra) + 1;
  return cp;
}

// The byte offset of the first invalid sequence in `text`, or npos when all of it is valid.
inline size_t utf8_first_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size())
    if (utf8_next(text, pos) < 0) return pos;
  return std::string_view::npos;
}

// `text` with each byte that does not belong to a valid sequence replaced by U+FFFD, so that
// writers of formats that require UTF-8 (JSON, protobuf strings) never emit invalid text.
inline std::string utf8_replace_invalid(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    if (utf8_next(text, pos) < 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      pos = start + 1;
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

inline bool is_unicode_scalar(int64_t cp) {
  return cp >= 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

// Appends the UTF-8 form of a Unicode scalar value (the caller checks is_unicode_scalar).
inline void utf8_append(std::string& out, int64_t cp) {
  uint32_t c = static_cast<uint32_t>(cp);
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

}  // namespace tapegrad::detail
