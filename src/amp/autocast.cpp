// The per-thread autocast state behind AutocastGuard.
#include "tapegrad/amp/autocast.h"

#include "cpu/gemm/sbgemm.h"
#include "tapegrad/core/error.h"

namespace tapegrad::amp {

namespace {

struct State {
  bool enabled = false;
  DType dtype = kBFloat16;
};

State& state(DeviceKind kind) {
  thread_local State states[kNumDeviceKinds];
  return states[static_cast<int>(kind)];
}

}  // namespace

AutocastGuard::AutocastGuard(const Device& device, DType dtype, bool enabled) : kind_(device.kind()) {
  if (enabled && device.is_cpu())
    TG_CHECK(dtype == kBFloat16, "AutocastGuard: autocast on the CPU runs in bfloat16, got ", dtype);
  if (enabled && device.is_cuda())
    TG_CHECK(dtype == kBFloat16 || dtype == kFloat16,
             "AutocastGuard: autocast on cuda runs in bfloat16 or float16, got ", dtype);
  State& s = state(kind_);
  saved_enabled_ = s.enabled;
  saved_dtype_ = s.dtype;
  s.enabled = enabled;
  s.dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  State& s = state(kind_);
  s.enabled = saved_enabled_;
  s.dtype = saved_dtype_;
}

bool is_autocast_enabled(DeviceKind kind) {
  return state(kind).enabled;
}

DType autocast_dtype(DeviceKind kind) {
  return state(kind).dtype;
}

const char* cpu_bf16_product_kernel() {
  return cpu::sbgemm_kernel_name(cpu::sbgemm_kernel());
}

DType product_dtype(const Device& device, DType dtype) {
  const State& s = state(device.kind());
  return s.enabled && dtype == kFloat32 ? s.dtype : dtype;
}

}  // namespace tapegrad::amp
