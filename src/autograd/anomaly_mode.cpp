// Anomaly mode state (per thread) and the finiteness check it applies to op outputs and gradients.
#include "tapegrad/autograd/anomaly_mode.h"

#include <cmath>
#include <vector>

#include "autograd/anomaly_check.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad::autograd {

namespace {
thread_local bool t_anomaly_enabled = false;
thread_local std::vector<std::string> t_module_scopes;
}  // namespace

bool anomaly_mode_enabled() {
  return t_anomaly_enabled;
}

DetectAnomalyGuard::DetectAnomalyGuard(bool enabled) : previous_(t_anomaly_enabled) {
  t_anomaly_enabled = enabled;
}
DetectAnomalyGuard::~DetectAnomalyGuard() {
  t_anomaly_enabled = previous_;
}

ModuleScope::ModuleScope(std::string name) {
  t_module_scopes.push_back(std::move(name));
}
ModuleScope::~ModuleScope() {
  t_module_scopes.pop_back();
}

std::string current_module_path() {
  std::string path;
  for (const std::string& scope : t_module_scopes) path += (path.empty() ? "" : "/") + scope;
  return path;
}

bool all_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating_point(t.dtype())) return true;
  NoGradGuard no_grad;
  // x * 0 is 0 for finite x and NaN for NaN or +-Inf, so one sum tells whether any is not finite.
  Tensor values = (t.dtype() == kFloat16 || t.dtype() == kBFloat16) ? t.to(kFloat32) : t;
  return std::isfinite(sum(mul(values.detach(), 0.0)).item());
}

std::string shapes_str(const std::vector<OutputMeta>& metas) {
  std::string out;
  for (const OutputMeta& m : metas) out += (out.empty() ? "" : ", ") + shape_str(m.sizes);
  return "(" + out + ")";
}

}  // namespace tapegrad::autograd
