// From the op enums of math/ops.h to the formula structs of unary.h and binary.h, generated from
// the lists in math/op_list.h: both backends pick a formula through these switches and the ops read
// a unary op's facts through unary_op_info(), so no list of ops is kept here by hand. Host only.
#pragma once

#include "math/binary.h"
#include "math/op_list.h"
#include "math/ops.h"
#include "math/unary.h"

namespace tapegrad::math {

#define TG_OP_CASE(Enum, name, Formula) \
  case Kind::Enum:                      \
    f(Formula{});                       \
    return;

// Calls f(Formula{}) for the runtime op.
template <class F>
void with_unary_op(UnaryOp op, F&& f) {
  using Kind = UnaryOp;
  switch (op) { TG_UNARY_OPS(TG_OP_CASE) }
}

template <class F>
void with_binary_op(BinaryOp op, F&& f) {
  using Kind = BinaryOp;
  switch (op) { TG_BINARY_OPS(TG_OP_CASE) }
}

template <class F>
void with_compare_op(CompareOp op, F&& f) {
  using Kind = CompareOp;
  switch (op) { TG_COMPARE_OPS(TG_OP_CASE) }
}

#undef TG_OP_CASE

// A unary op's facts (see math/unary.h), as runtime values.
struct UnaryOpInfo {
  const char* name;
  bool integers;
  bool cheap;
  BackwardReads reads;
};

inline const UnaryOpInfo& unary_op_info(UnaryOp op) {
#define TG_OP_INFO(Enum, name, Formula) UnaryOpInfo{name, Formula::kIntegers, Formula::kCheap, Formula::kReads},
  static constexpr UnaryOpInfo kInfo[] = {TG_UNARY_OPS(TG_OP_INFO)};
#undef TG_OP_INFO
  static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == kNumUnaryOps, "one entry per unary op");
  return kInfo[static_cast<int>(op)];
}

// The unary ops that are defined on integers too (no transcendental functions).
inline bool unary_accepts_integers(UnaryOp op) {
  return unary_op_info(op).integers;
}

}  // namespace tapegrad::math
