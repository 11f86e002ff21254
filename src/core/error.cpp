// Throwing helpers behind TG_CHECK and TG_ASSERT (kept out of line so the macros stay small).
#include "tapegrad/core/error.h"

namespace tapegrad::detail {

void throw_error(const std::string& message) {
  throw Error(message);
}

void throw_internal(const char* file, int line, const std::string& message) {
  throw Error(str_cat("internal error (a tapegrad bug, please report it) at ", file, ":", line, ": ", message));
}

}  // namespace tapegrad::detail
