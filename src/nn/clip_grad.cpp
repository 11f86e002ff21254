// clip_grad_norm_ and clip_grad_value_ (torch.nn.utils' formulas).
#include "tapegrad/nn/clip_grad.h"

#include <cmath>
#include <limits>
#include <map>

#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad::nn::utils {

namespace {

// The gradients to clip, checked: every parameter defined, every gradient floating-point.
std::vector<Tensor> gradients(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    TG_CHECK(params[i].defined(), op, ": parameter ", i, " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    TG_CHECK(g.is_floating_point(), op, ": the gradient of parameter ", i, " has dtype ", g.dtype(),
             ", not a floating-point type");
    grads.push_back(g);
  }
  return grads;
}

// float16 and bfloat16 only store numbers on the CPU; arithmetic on them goes through float32
// (which is also what the GPU kernels compute in before rounding).
bool cpu_half(const Tensor& t) {
  return t.device().is_cpu() && (t.dtype() == kFloat16 || t.dtype() == kBFloat16);
}

// sum(|g|^p) for a finite p, max(|g|) for p = inf, as a float64 0-dim tensor on `device`.
Tensor partial_norm(const Tensor& grad, double p, Device device) {
  Tensor part;
  if (std::isinf(p)) {
    // max(|g|) cannot overflow; 16-bit values are compared in float32.
    Tensor g = grad.dtype() == kFloat16 || grad.dtype() == kBFloat16 ? grad.to(kFloat32) : grad;
    part = g.numel() == 0 ? zeros({}, TensorOptions(g.dtype()).device(g.device())) : max(abs(g));
  } else {
    // |g|^p overflows float32 from |g| ~ 1.8e19 (p = 2) and float16 from 256, and a sum of them
    // can overflow even when every term fits; the total would then be inf and every gradient
    // scaled by 0. So the powers and their sum are taken in float64 (PyTorch's CPU norm kernels
    // accumulate float32 in double too), at the cost of one float64 copy of one gradient at a time.
    Tensor g = grad.dtype() == kFloat64 ? grad : grad.to(kFloat64);
    if (p == 2.0)
      part = sum(square(g));
    else if (p == 1.0)
      part = sum(abs(g));
    else
      part = sum(pow(abs(g), p));
  }
  return part.to(device, kFloat64);
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  const char* op = "clip_grad_norm_";
  TG_CHECK(max_norm >= 0, op, ": max_norm must be >= 0, got ", max_norm);  // NaN fails too
  TG_CHECK(norm_type > 0, op, ": norm_type must be > 0 (or infinity), got ", norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients(params, op);
  if (grads.empty()) return zeros({}, TensorOptions(kFloat32));
  const Device device = grads.front().device();
  const bool inf_norm = std::isinf(norm_type);
  DType dtype = grads.front().dtype();
  Tensor total;
  for (const Tensor& g : grads) {
    dtype = promote_types(dtype, g.dtype());
    Tensor part = partial_norm(g, norm_type, device);
    total = !total.defined() ? part : inf_norm ? maximum(total, part) : add(total, part);
  }
  if (!inf_norm) total = norm_type == 2.0 ? sqrt(total) : norm_type == 1.0 ? total : pow(total, 1.0 / norm_type);
  if (error_if_nonfinite) {
    const double value = total.item();
    TG_CHECK(std::isfinite(value), op, ": the total norm of order ", norm_type, " of the gradients is ", value,
             ", so they cannot be clipped; pass error_if_nonfinite = false to scale them by it anyway");
  }
  // min(1, max_norm / (total + 1e-6)) stays on the device: no read-back, no branch on the host.
  Tensor coef = clamp(div(full_like(total, max_norm), add(total, 1e-6)), -std::numeric_limits<double>::infinity(), 1.0);
  std::map<std::pair<int, int>, Tensor> on_device;  // coef copied once per device
  for (const Tensor& g : grads) {
    const Device d = g.device();
    Tensor& c = on_device[{static_cast<int>(d.kind()), static_cast<int>(d.index())}];
    if (!c.defined()) c = coef.to(d);
    Tensor grad = g;
    if (cpu_half(grad))
      grad.copy_(mul(grad.to(kFloat32), c));
    else
      grad.mul_(c);
  }
  return total.to(dtype);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  const char* op = "clip_grad_value_";
  TG_CHECK(clip_value >= 0, op, ": clip_value must be >= 0, got ", clip_value);  // NaN fails too
  NoGradGuard no_grad;
  for (Tensor g : gradients(params, op)) {
    if (cpu_half(g))
      g.copy_(clamp(g.to(kFloat32), -clip_value, clip_value));
    else
      g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace tapegrad::nn::utils
