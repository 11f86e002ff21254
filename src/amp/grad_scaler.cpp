// GradScaler: PyTorch's torch.cuda.amp.GradScaler (grad_scaler.py and _amp_update_scale_) for the
// optimisers of include/tapegrad/optim. The scale's update runs on the host, on a float32 copy of
// the scale that only this class writes: step() has read the found-inf flags back already (it
// must, to decide whether to step), so the rule costs no further wait for the device, and the
// device's scale tensor is refilled from the host copy.
#include "tapegrad/amp/grad_scaler.h"

#include <cmath>
#include <string>
#include <utility>

#include "backend/kernel_table.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad::amp {

namespace {

// The scale is stored in float32 (as PyTorch's is): a double that is finite but beyond float32's
// range would be stored as inf (every step then skipped, the scale backed off to inf again), and
// one below its smallest subnormal as 0, so both are refused along with non-finite and <= 0 ones.
void check_init_scale(double v, const char* where, const char* field = "init_scale") {
  TG_CHECK(std::isfinite(v) && v > 0, where, ": ", field, " must be finite and > 0, got ", v);
  const float stored = static_cast<float>(v);
  TG_CHECK(std::isfinite(stored) && stored > 0, where, ": ", field, " ", v,
           " is not representable in float32 (the scale's type), whose range is about 1.4e-45 to 3.4e38");
}
void check_growth_factor(double v, const char* where) {
  TG_CHECK(v > 1.0 && std::isfinite(v), where, ": growth_factor must be > 1 (and finite), got ", v);
}
void check_backoff_factor(double v, const char* where) {
  TG_CHECK(v > 0.0 && v < 1.0, where, ": backoff_factor must be in (0, 1), got ", v);
}
void check_growth_interval(int64_t v, const char* where) {
  TG_CHECK(v > 0 && v <= INT32_MAX, where, ": growth_interval must be a positive int32, got ", v);
}

// The device a gradient lives on, as a map key (Device has no ordering of its own).
std::pair<int, int> device_key(const Device& d) {
  return {static_cast<int>(d.kind()), d.index()};
}

}  // namespace

GradScaler::GradScaler(double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval,
                       bool enabled)
    : enabled_(enabled),
      init_scale_(init_scale),
      growth_factor_(growth_factor),
      backoff_factor_(backoff_factor),
      growth_interval_(growth_interval),
      scale_value_(static_cast<float>(init_scale)) {
  if (!enabled_) return;
  const char* where = "GradScaler";
  check_init_scale(init_scale, where);
  check_growth_factor(growth_factor, where);
  check_backoff_factor(backoff_factor, where);
  check_growth_interval(growth_interval, where);
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  TG_CHECK(outputs.defined(), "GradScaler::scale: the tensor is undefined");
  TG_CHECK(outputs.is_floating_point(), "GradScaler::scale: expected a floating-point tensor, got ", outputs.dtype());
  if (!scale_.defined()) scale_ = full({}, scale_value_, TensorOptions(kFloat32).device(outputs.device()));
  Tensor scaled = mul(outputs, scale_.device() == outputs.device() ? scale_ : scale_.to(outputs.device()));
  return scaled.dtype() == outputs.dtype() ? scaled : scaled.to(outputs.dtype());
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> scaled;
  scaled.reserve(outputs.size());
  for (const Tensor& t : outputs) scaled.push_back(scale(t));
  return scaled;
}

void GradScaler::check_started(const char* method) const {
  TG_CHECK(scale_.defined(), "GradScaler::", method,
           ": the scale does not exist yet; this may indicate your script did not use scaler.scale(loss) "
           "earlier in the iteration");
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_started("unscale_");
  OptimizerState& state = states_[&optimizer];
  TG_CHECK(state.stage != Stage::Unscaled,
           "GradScaler::unscale_: unscale_() has already been called on this optimizer since the last update()");
  TG_CHECK(state.stage != Stage::Stepped, "GradScaler::unscale_: unscale_() is being called after step()");
  NoGradGuard no_grad;
  // Gradients grouped by device, each group unscaled by one kernel call. A non-contiguous
  // gradient (set by hand) is unscaled in a contiguous copy and copied back.
  std::map<std::pair<int, int>, std::vector<Tensor>> by_device;
  std::vector<std::pair<Tensor, Tensor>> copied_back;
  const std::vector<Tensor>& params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    TG_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64 || g.dtype() == kFloat16 || g.dtype() == kBFloat16,
             "GradScaler::unscale_: the gradient of parameter ", i, " has dtype ", g.dtype(),
             "; expected float32, float64, float16 or bfloat16");
    if (!g.is_contiguous()) {
      Tensor c = g.contiguous();
      copied_back.emplace_back(g, c);
      g = c;
    }
    by_device[device_key(g.device())].push_back(g);
  }
  // The inverse in double, then rounded to float, as PyTorch's scale.double().reciprocal().float().
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_value_));
  state.found_inf_per_device.clear();
  for (const auto& entry : by_device) {
    const Device device = entry.second.front().device();
    const TensorOptions options = TensorOptions(kFloat32).device(device);
    Tensor found_inf = zeros({}, options);
    Tensor inv = full({}, inv_scale, options);
    TG_KERNEL(device, non_finite_check_and_unscale)(entry.second, found_inf, inv);
    state.found_inf_per_device.push_back(found_inf);
  }
  for (auto& [grad, contiguous] : copied_back) grad.copy_(contiguous);
  state.read = false;
  state.stage = Stage::Unscaled;
}

bool GradScaler::read_found_inf(OptimizerState& state) const {
  if (!state.read) {
    state.found_any = false;
    for (const Tensor& f : state.found_inf_per_device) state.found_any = state.found_any || f.item() != 0.0;
    state.read = true;
  }
  return state.found_any;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_started("step");
  TG_CHECK(states_[&optimizer].stage != Stage::Stepped,
           "GradScaler::step: step() has already been called since the last update()");
  if (states_[&optimizer].stage == Stage::Ready) unscale_(optimizer);
  OptimizerState& state = states_[&optimizer];
  TG_CHECK(!state.found_inf_per_device.empty(),
           "GradScaler::step: no inf checks were recorded for this optimizer (none of its parameters has a "
           "gradient; call backward() on the scaled loss first)");
  const bool skip = read_found_inf(state);
  if (!skip) optimizer.step();
  state.stage = Stage::Stepped;
  return !skip;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_started("update");
  bool recorded = false, found_inf = false;
  for (auto& entry : states_) {
    if (entry.second.found_inf_per_device.empty()) continue;
    recorded = true;
    found_inf = read_found_inf(entry.second) || found_inf;
  }
  TG_CHECK(recorded,
           "GradScaler::update: no inf checks were recorded prior to update(); call step() or unscale_() "
           "on an optimizer whose parameters have gradients first");
  // _amp_update_scale_: the products in double, stored in float32.
  if (found_inf) {
    scale_value_ = static_cast<float>(static_cast<double>(scale_value_) * backoff_factor_);
    growth_tracker_ = 0;
  } else {
    const int64_t successful = growth_tracker_ + 1;
    if (successful == growth_interval_) {
      const float grown = static_cast<float>(static_cast<double>(scale_value_) * growth_factor_);
      if (std::isfinite(grown)) scale_value_ = grown;  // never grows past float32's range
      growth_tracker_ = 0;
    } else {
      growth_tracker_ = successful;
    }
  }
  scale_.fill_(scale_value_);
  states_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_started("update");
  check_init_scale(new_scale, "GradScaler::update", "new_scale");
  scale_value_ = static_cast<float>(new_scale);
  scale_.fill_(scale_value_);
  states_.clear();
}

double GradScaler::get_scale() const {
  return enabled_ ? static_cast<double>(scale_value_) : 1.0;
}

void GradScaler::set_growth_factor(double v) {
  check_growth_factor(v, "GradScaler::set_growth_factor");
  growth_factor_ = v;
}
void GradScaler::set_backoff_factor(double v) {
  check_backoff_factor(v, "GradScaler::set_backoff_factor");
  backoff_factor_ = v;
}
void GradScaler::set_growth_interval(int64_t v) {
  check_growth_interval(v, "GradScaler::set_growth_interval");
  growth_interval_ = v;
}

StateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", full({}, scale_value_, TensorOptions(kFloat32))},
          {"growth_factor", full({}, growth_factor_, TensorOptions(kFloat64))},
          {"backoff_factor", full({}, backoff_factor_, TensorOptions(kFloat64))},
          {"growth_interval", full({}, static_cast<double>(growth_interval_), TensorOptions(kInt64))},
          {"_growth_tracker", full({}, static_cast<double>(growth_tracker_), TensorOptions(kInt32))}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!enabled_) return;
  const char* where = "GradScaler::load_state_dict";
  TG_CHECK(!state.empty(), where,
           ": the state dict is empty, possibly because it was saved from a disabled GradScaler");
  auto value = [&](const std::string& key) {
    for (const auto& entry : state) {
      if (entry.first != key) continue;
      TG_CHECK(entry.second.defined() && entry.second.numel() == 1, where, ": \"", key, "\" must hold one number");
      return entry.second.item();
    }
    TG_CHECK(false, where, ": missing key \"", key, "\"");
    return 0.0;
  };
  const double scale = value("scale"), growth = value("growth_factor"), backoff = value("backoff_factor");
  const double interval = value("growth_interval"), tracker = value("_growth_tracker");
  const std::string w = std::string(where) + ": \"";
  check_init_scale(scale, where, "\"scale\"");
  check_growth_factor(growth, (w + "growth_factor\"").c_str());
  check_backoff_factor(backoff, (w + "backoff_factor\"").c_str());
  // Range first: converting a double beyond int64's range is undefined behaviour.
  TG_CHECK(interval == std::floor(interval) && interval >= 1 && interval <= INT32_MAX, where,
           ": \"growth_interval\" must be a positive int32, got ", interval);
  check_growth_interval(static_cast<int64_t>(interval), (w + "growth_interval\"").c_str());
  TG_CHECK(tracker >= 0 && tracker == std::floor(tracker) && tracker < interval, where,
           ": \"_growth_tracker\" must be an integer in [0, growth_interval), got ", tracker);
  init_scale_ = scale;
  scale_value_ = static_cast<float>(scale);
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int64_t>(tracker);
  if (scale_.defined()) scale_.fill_(scale_value_);
}

}  // namespace tapegrad::amp
