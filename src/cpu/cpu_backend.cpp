// Fills the CPU dispatch table (the allocator is caching_allocator.cpp's). The cpu::widened kernels
// take 16-bit floats through float32 copies (widened_slots.h).
#include "cpu/caching_allocator.h"
#include "cpu/cpu_kernels.h"
#include "cpu/widened_slots.h"

namespace tapegrad::backend {

void register_cpu_backend() {
  KernelTable& t = mutable_kernels(DeviceKind::CPU);
  t.allocator = &cpu::cpu_allocator();
  t.copy = cpu::copy;
  t.fill = cpu::fill;
  t.arange = cpu::arange;
  t.uniform = cpu::widened::uniform;
  t.normal = cpu::widened::normal;
  t.randint = cpu::randint;
  t.unary = cpu::unary;
  t.unary_backward = cpu::unary_backward;
  t.binary = cpu::binary;
  t.compare = cpu::compare;
  t.where = cpu::where;
  t.clamp = cpu::clamp;
  t.reduce = cpu::widened::reduce;
  t.reduce_with_index = cpu::widened::reduce_with_index;
  t.gemm = cpu::gemm;
  t.gemm_mixed = cpu::gemm_mixed;
  t.gemm_bias = cpu::gemm_bias;
  t.bmm = cpu::bmm;
  t.softmax = cpu::widened::softmax;
  t.softmax_backward = cpu::widened::softmax_backward;
  t.cross_entropy = cpu::widened::cross_entropy;
  t.cross_entropy_backward = cpu::widened::cross_entropy_backward;
  t.layer_norm = cpu::widened::layer_norm;
  t.layer_norm_backward = cpu::widened::layer_norm_backward;
  t.index_select = cpu::index_select;
  t.index_add = cpu::index_add;
  t.gather = cpu::gather;
  t.scatter_add = cpu::scatter_add;
  t.lstm_recurrence_forward = cpu::lstm_recurrence_forward;
  t.lstm_recurrence_backward = cpu::lstm_recurrence_backward;
  t.sgd_step = cpu::sgd_step;
  t.adam_step = cpu::adam_step;
  t.sgd_step_many = cpu::sgd_step_many;
  t.adam_step_many = cpu::adam_step_many;
  t.non_finite_check_and_unscale = cpu::non_finite_check_and_unscale;
}

}  // namespace tapegrad::backend
