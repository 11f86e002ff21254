// Every elementwise op kind, listed once as (Enum, "name", Formula). The op enums and op names
// (math/ops.h), the formula switches and the per-op facts (math/op_switch.h) are
// generated from these lists; a new op of a kind is one line here plus its formula struct.
// A unary op's facts (integers, cost, what its backward reads) are members of its formula struct
// (math/unary.h); its scalar parameters travel in math::Scalars through the same kernel slot.
#pragma once

#define TG_UNARY_OPS(X)                   \
  X(Neg, "neg", NegOp)                    \
  X(Abs, "abs", AbsOp)                    \
  X(Exp, "exp", ExpOp)                    \
  X(Log, "log", LogOp)                    \
  X(Sqrt, "sqrt", SqrtOp)                 \
  X(Rsqrt, "rsqrt", RsqrtOp)              \
  X(Tanh, "tanh", TanhOp)                 \
  X(Sigmoid, "sigmoid", SigmoidOp)        \
  X(Relu, "relu", ReluOp)                 \
  X(Gelu, "gelu", GeluOp)                 \
  X(Square, "square", SquareOp)           \
  X(LeakyRelu, "leaky_relu", LeakyReluOp) \
  X(Softplus, "softplus", SoftplusOp)     \
  X(Elu, "elu", EluOp)                    \
  X(Silu, "silu", SiluOp)

#define TG_BINARY_OPS(X)           \
  X(Add, "add", AddOp)             \
  X(Sub, "sub", SubOp)             \
  X(Mul, "mul", MulOp)             \
  X(Div, "div", DivOp)             \
  X(Pow, "pow", PowOp)             \
  X(Maximum, "maximum", MaximumOp) \
  X(Minimum, "minimum", MinimumOp)

#define TG_COMPARE_OPS(X) \
  X(Eq, "eq", EqOp)       \
  X(Ne, "ne", NeOp)       \
  X(Lt, "lt", LtOp)       \
  X(Le, "le", LeOp)       \
  X(Gt, "gt", GtOp)       \
  X(Ge, "ge", GeOp)
