// Strict command-line values for the examples: a flag's whole text must be a number in its range
// ("1e-3x", "abc", "-2" and "" are errors naming the flag, never 0 or a prefix), and a stray
// positional argument is an error. Flags are declared to cxxopts as strings and read through these.
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <limits>
#include <stdexcept>
#include <string>

namespace examples {

// A command-line mistake; main() prints it and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void reject_space(const std::string& flag, const std::string& text, const char* kind) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) ||
      std::isspace(static_cast<unsigned char>(text.back())))
    throw UsageError("--" + flag + ": '" + text + "' is not " + kind);
}

inline int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  reject_space(flag, text, "an integer");
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size()) throw UsageError("--" + flag + ": '" + text + "' is not an integer");
  if (errno == ERANGE || value < min || value > max)
    throw UsageError("--" + flag + ": " + text + " is out of range (expected " + std::to_string(min) + " to " +
                     std::to_string(max) + ")");
  return value;
}

inline uint64_t parse_uint64(const std::string& flag, const std::string& text) {
  reject_space(flag, text, "a non-negative integer");
  // strtoull would accept "-1" as 2^64 - 1.
  if (text.front() == '-' || text.front() == '+')
    throw UsageError("--" + flag + ": '" + text + "' is not a non-negative integer");
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size())
    throw UsageError("--" + flag + ": '" + text + "' is not a non-negative integer");
  if (errno == ERANGE) throw UsageError("--" + flag + ": " + text + " is too large");
  return value;
}

inline std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// A finite number in [min, max]; with min_exclusive, in (min, max].
inline double parse_real(const std::string& flag, const std::string& text, double min, double max,
                         bool min_exclusive = false) {
  reject_space(flag, text, "a number");
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) throw UsageError("--" + flag + ": '" + text + "' is not a number");
  if (!std::isfinite(value) || errno == ERANGE || value < min || value > max || (min_exclusive && value == min))
    throw UsageError("--" + flag + ": " + text + " is out of range (expected a finite number " +
                     (min_exclusive ? "above " : "from ") + number_text(min) + " up to " + number_text(max) + ")");
  return value;
}

inline int64_t int_flag(const cxxopts::ParseResult& args, const std::string& flag, int64_t min, int64_t max) {
  return parse_int(flag, args[flag].as<std::string>(), min, max);
}
inline uint64_t uint64_flag(const cxxopts::ParseResult& args, const std::string& flag) {
  return parse_uint64(flag, args[flag].as<std::string>());
}
inline double real_flag(const cxxopts::ParseResult& args, const std::string& flag, double min, double max,
                        bool min_exclusive = false) {
  return parse_real(flag, args[flag].as<std::string>(), min, max, min_exclusive);
}

inline void reject_positional(const cxxopts::ParseResult& args) {
  if (!args.unmatched().empty()) throw UsageError("unexpected argument '" + args.unmatched().front() + "'");
}

}  // namespace examples
