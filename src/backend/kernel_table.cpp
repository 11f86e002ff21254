// The per-device dispatch tables and their one-time registration.
#include "backend/kernel_table.h"

#include <mutex>

namespace tapegrad::backend {

namespace {
KernelTable g_tables[kNumDeviceKinds];
std::once_flag g_registered;
}  // namespace

KernelTable& mutable_kernels(DeviceKind kind) { return g_tables[static_cast<int>(kind)]; }

const KernelTable& kernels(DeviceKind kind) {
  std::call_once(g_registered, [] {
    register_cpu_backend();
    register_cuda_backend();
  });
  return g_tables[static_cast<int>(kind)];
}

void missing_kernel(const char* kernel, DeviceKind kind) {
  detail::throw_error(detail::str_cat("no ", device_kind_name(kind), " kernel for ", kernel,
                                      kind == DeviceKind::CUDA && !cuda::is_available()
                                          ? " (this build or machine has no CUDA backend)"
                                          : ""));
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Square: return "square";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
  }
  return "?";
}

}  // namespace tapegrad::backend
