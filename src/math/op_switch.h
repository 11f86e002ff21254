// From the kernel table's op enums to the formula structs of unary.h and binary.h: both backends
// pick a formula by these switches, so a new op is one line here plus its struct. Host only.
#pragma once

#include "backend/kernel_table.h"
#include "math/binary.h"
#include "math/unary.h"

namespace tapegrad::math {

// Calls f(OpStruct{}) for the runtime op.
template <class F>
void with_unary_op(backend::UnaryOp op, F&& f) {
  using backend::UnaryOp;
  switch (op) {
    case UnaryOp::Neg: f(NegOp{}); return;
    case UnaryOp::Abs: f(AbsOp{}); return;
    case UnaryOp::Exp: f(ExpOp{}); return;
    case UnaryOp::Log: f(LogOp{}); return;
    case UnaryOp::Sqrt: f(SqrtOp{}); return;
    case UnaryOp::Rsqrt: f(RsqrtOp{}); return;
    case UnaryOp::Tanh: f(TanhOp{}); return;
    case UnaryOp::Sigmoid: f(SigmoidOp{}); return;
    case UnaryOp::Relu: f(ReluOp{}); return;
    case UnaryOp::Gelu: f(GeluOp{}); return;
    case UnaryOp::Square: f(SquareOp{}); return;
  }
}

template <class F>
void with_binary_op(backend::BinaryOp op, F&& f) {
  using backend::BinaryOp;
  switch (op) {
    case BinaryOp::Add: f(AddOp{}); return;
    case BinaryOp::Sub: f(SubOp{}); return;
    case BinaryOp::Mul: f(MulOp{}); return;
    case BinaryOp::Div: f(DivOp{}); return;
    case BinaryOp::Pow: f(PowOp{}); return;
    case BinaryOp::Maximum: f(MaximumOp{}); return;
    case BinaryOp::Minimum: f(MinimumOp{}); return;
  }
}

template <class F>
void with_compare_op(backend::CompareOp op, F&& f) {
  using backend::CompareOp;
  switch (op) {
    case CompareOp::Eq: f(EqOp{}); return;
    case CompareOp::Ne: f(NeOp{}); return;
    case CompareOp::Lt: f(LtOp{}); return;
    case CompareOp::Le: f(LeOp{}); return;
    case CompareOp::Gt: f(GtOp{}); return;
    case CompareOp::Ge: f(GeOp{}); return;
  }
}

// The unary ops that are defined on integers too (no transcendental functions).
inline bool unary_accepts_integers(backend::UnaryOp op) {
  using backend::UnaryOp;
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Square;
}

}  // namespace tapegrad::math
