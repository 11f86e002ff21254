// Number formatting for extra_repr(): the shortest text that reads back as the same double, like
// Python's repr of a float ("0.5", not std::to_string's "0.500000").
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tapegrad::nn {

inline std::string format_double(double value) {
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string out = buffer;
  // Python writes 1.0, not 1, for a whole float.
  if (out.find_first_of(".eEna") == std::string::npos) out += ".0";
  return out;
}

}  // namespace tapegrad::nn
