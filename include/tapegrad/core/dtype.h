// DType: the element type of a tensor, with its size, name and promotion rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace tapegrad {

// f16 and bf16 compute in float on both devices, each op rounding its result once (docs/amp.md).
enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);         // "float32", "int64", ...
DType parse_dtype(const std::string& name);  // accepts "float32"/"f32"/"float", ...; throws on others
bool is_floating_point(DType dtype);
bool is_integral(DType dtype);  // Int32, Int64, Bool
// The type both operands are converted to in a binary op (NumPy/PyTorch rule for two tensors).
DType promote_types(DType a, DType b);

std::ostream& operator<<(std::ostream& out, DType dtype);

}  // namespace tapegrad
