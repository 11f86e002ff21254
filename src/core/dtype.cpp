// DType sizes, names and the promotion lattice.
#include "tapegrad/core/dtype.h"

#include "tapegrad/core/error.h"

namespace tapegrad {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::Float16:
      return 2;
    case DType::BFloat16:
      return 2;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Bool:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "float") return kFloat32;
  if (name == "float64" || name == "f64" || name == "double") return kFloat64;
  if (name == "float16" || name == "f16" || name == "half") return kFloat16;
  if (name == "bfloat16" || name == "bf16") return kBFloat16;
  if (name == "int32" || name == "i32" || name == "int") return kInt32;
  if (name == "int64" || name == "i64" || name == "long") return kInt64;
  if (name == "bool") return kBool;
  TG_CHECK(false, "parse_dtype: unknown dtype '", name,
           "' (expected float32, float64, float16, bfloat16, int32, int64 or bool)");
}

bool is_floating_point(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16;
}

bool is_integral(DType dtype) {
  return dtype == kInt32 || dtype == kInt64 || dtype == kBool;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 has no exact common 16-bit type: both fit in f32.
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool:
        return 0;
      case DType::Int32:
        return 1;
      case DType::Int64:
        return 2;
      case DType::Float16:
        return 3;
      case DType::BFloat16:
        return 3;
      case DType::Float32:
        return 4;
      case DType::Float64:
        return 5;
    }
    return 0;
  };
  return rank(a) > rank(b) ? a : b;
}

std::ostream& operator<<(std::ostream& out, DType dtype) {
  return out << dtype_name(dtype);
}

}  // namespace tapegrad
