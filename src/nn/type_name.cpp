// Demangling for Module::name(): PyTorch prints a module's class name, which C++ only offers
// mangled (GCC, Clang) or prefixed with "class " (MSVC).
#include "nn/type_name.h"

#include <cstdlib>
#include <memory>

#if defined(__GNUG__)
#include <cxxabi.h>
#endif

namespace tapegrad::nn {

std::string unqualified_type_name(const std::type_info& type) {
  return unqualified_type_name_of(type.name());
}

std::string unqualified_type_name_of(const char* mangled) {
  std::string full = mangled;
#if defined(__GNUG__)
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(full.c_str(), nullptr, nullptr, &status),
                                                   std::free);
  if (status == 0 && demangled) full = demangled.get();
#endif
  for (const char* tag : {"class ", "struct "})
    if (full.rfind(tag, 0) == 0) full = full.substr(std::char_traits<char>::length(tag));
  // Cut at the last "::" outside template brackets and parentheses.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i + 1 < full.size(); ++i) {
    char c = full[i];
    if (c == '<' || c == '(')
      ++depth;
    else if (c == '>' || c == ')')
      --depth;
    else if (depth == 0 && c == ':' && full[i + 1] == ':')
      start = i + 2;
  }
  return full.substr(start);
}

}  // namespace tapegrad::nn
