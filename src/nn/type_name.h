// The unqualified, demangled name of a C++ type, for Module::name()'s default.
#pragma once

#include <string>
#include <typeinfo>

namespace tapegrad::nn {

// "tapegrad::nn::Linear" -> "Linear", "(anonymous namespace)::Net" -> "Net", "ns::Block<int>" ->
// "Block<int>" (qualifiers inside template arguments are kept).
std::string unqualified_type_name(const std::type_info& type);
// The same from a type_info::name() string.
std::string unqualified_type_name_of(const char* mangled);

}  // namespace tapegrad::nn
