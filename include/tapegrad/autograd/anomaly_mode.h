// Anomaly mode, like PyTorch's detect_anomaly: while a DetectAnomalyGuard is alive on a thread,
// every op recorded on the tape checks its outputs for NaN/Inf, and backward checks every gradient
// a node produces. The first bad value throws a tapegrad::Error naming the op, its input and output
// shapes, whether it happened forward or backward, and where in the model the op ran (the
// ModuleScope path at the time of the forward pass, e.g. "classifier/1:Linear").
//
// Off by default. When on, each recorded op and each backward node pays one extra reduction and a
// device-to-host read per floating-point tensor (see docs/reliability.md for measured cost).
// Ops run under NoGradGuard are not recorded and therefore not checked.
#pragma once

#include <string>

namespace tapegrad::autograd {

bool anomaly_mode_enabled();  // for the calling thread

class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true);
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Names a part of the model for anomaly reports while alive; scopes nest into a '/'-separated
// path. Sequential opens one per child ("0:Linear"); user modules can open their own.
class ModuleScope {
 public:
  explicit ModuleScope(std::string name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
};

// The current path ("" outside every scope).
std::string current_module_path();

}  // namespace tapegrad::autograd

namespace tapegrad {
using autograd::DetectAnomalyGuard;
}
