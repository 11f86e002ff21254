// Number formatting for extra_repr(): the shortest text that reads back as the same double, like
// Python's repr of a float ("0.5", not std::to_string's "0.500000").
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tapegrad::nn {

// Python's repr: the fewest significant digits that read back exactly, written positionally
// ("20.0", "0.0001") when the decimal exponent is in [-4, 16), else in scientific form ("1e-05",
// "1e+16").
inline std::string format_double(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char buffer[48];
  int digits = 0;  // significant digits after the first
  for (; digits < 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  const int exponent = value == 0 ? 0 : std::atoi(std::strchr(buffer, 'e') + 1);
  if (exponent < -4 || exponent >= 16) return buffer;  // "%e" already matches Python's "1e-05"
  const int decimals = digits > exponent ? digits - exponent : 0;
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  std::string out = buffer;
  if (decimals == 0) out += ".0";  // Python writes 20.0, not 20, for a whole float
  return out;
}

}  // namespace tapegrad::nn
