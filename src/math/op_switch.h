// From the kernel table's op enums to the formula structs of unary.h and binary.h, generated from
// the lists in math/op_list.h: both backends pick a formula through these switches and the ops read
// a unary op's facts through unary_op_info(), so no list of ops is kept here by hand. Host only.
#pragma once

#include "backend/kernel_table.h"
#include "math/binary.h"
#include "math/op_list.h"
#include "math/unary.h"

namespace tapegrad::math {

#define TG_OP_CASE(Enum, name, Formula) \
  case Kind::Enum:                      \
    f(Formula{});                       \
    return;

// Calls f(Formula{}) for the runtime op.
template <class F>
void with_unary_op(backend::UnaryOp op, F&& f) {
  using Kind = backend::UnaryOp;
  switch (op) { TG_UNARY_OPS(TG_OP_CASE) }
}

template <class F>
void with_binary_op(backend::BinaryOp op, F&& f) {
  using Kind = backend::BinaryOp;
  switch (op) { TG_BINARY_OPS(TG_OP_CASE) }
}

template <class F>
void with_compare_op(backend::CompareOp op, F&& f) {
  using Kind = backend::CompareOp;
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

inline const UnaryOpInfo& unary_op_info(backend::UnaryOp op) {
#define TG_OP_INFO(Enum, name, Formula) UnaryOpInfo{name, Formula::kIntegers, Formula::kCheap, Formula::kReads},
  static constexpr UnaryOpInfo kInfo[] = {TG_UNARY_OPS(TG_OP_INFO)};
#undef TG_OP_INFO
  static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == backend::kNumUnaryOps, "one entry per unary op");
  return kInfo[static_cast<int>(op)];
}

// The unary ops that are defined on integers too (no transcendental functions).
inline bool unary_accepts_integers(backend::UnaryOp op) {
  return unary_op_info(op).integers;
}

}  // namespace tapegrad::math
