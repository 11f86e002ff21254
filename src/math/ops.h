// The elementwise op kinds and the reduction kinds, generated from math/op_list.h (one line per op
// there). The kernel table's slots take them (backend/kernel_table.h names them backend::UnaryOp
// and so on); the formula switches and the per-op facts are in math/op_switch.h. Host only.
#pragma once

#include "math/op_list.h"

namespace tapegrad::math {

#define TG_OP_ENUMERATOR(Enum, name, Formula) Enum,
enum class UnaryOp { TG_UNARY_OPS(TG_OP_ENUMERATOR) };
enum class BinaryOp { TG_BINARY_OPS(TG_OP_ENUMERATOR) };
enum class CompareOp { TG_COMPARE_OPS(TG_OP_ENUMERATOR) };
#undef TG_OP_ENUMERATOR
enum class ReduceOp { Sum, Mean, Max, Min };

#define TG_OP_COUNT(Enum, name, Formula) +1
constexpr int kNumUnaryOps = 0 TG_UNARY_OPS(TG_OP_COUNT);
constexpr int kNumBinaryOps = 0 TG_BINARY_OPS(TG_OP_COUNT);
constexpr int kNumCompareOps = 0 TG_COMPARE_OPS(TG_OP_COUNT);
#undef TG_OP_COUNT

// The op's name as the ops and error messages spell it ("leaky_relu"), "?" for no op.
#define TG_OP_NAME(Enum, name, Formula) \
  case Kind::Enum:                      \
    return name;

inline const char* unary_op_name(UnaryOp op) {
  using Kind = UnaryOp;
  switch (op) { TG_UNARY_OPS(TG_OP_NAME) }
  return "?";
}

inline const char* binary_op_name(BinaryOp op) {
  using Kind = BinaryOp;
  switch (op) { TG_BINARY_OPS(TG_OP_NAME) }
  return "?";
}

inline const char* compare_op_name(CompareOp op) {
  using Kind = CompareOp;
  switch (op) { TG_COMPARE_OPS(TG_OP_NAME) }
  return "?";
}

#undef TG_OP_NAME

}  // namespace tapegrad::math
