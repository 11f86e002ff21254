// Errors: every caller mistake becomes a tapegrad::Error whose message names the op and the
// offending shapes, dtypes or devices. Library code never calls exit() or abort().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tapegrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] void throw_error(const std::string& message);
[[noreturn]] void throw_internal(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace tapegrad

// TG_CHECK: a caller's mistake. The message should start with the op's name.
#define TG_CHECK(cond, ...)                                                                 \
  do {                                                                                      \
    if (!(cond)) ::tapegrad::detail::throw_error(::tapegrad::detail::str_cat(__VA_ARGS__)); \
  } while (0)

// TG_ASSERT: one of our own invariants; failing it is a tapegrad bug.
#define TG_ASSERT(cond, ...)                                                                                          \
  do {                                                                                                                \
    if (!(cond))                                                                                                      \
      ::tapegrad::detail::throw_internal(__FILE__, __LINE__, ::tapegrad::detail::str_cat(#cond, " ", ##__VA_ARGS__)); \
  } while (0)
