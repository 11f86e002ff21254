// Adam and AdamW (torch.optim.Adam/AdamW's rule, bias correction included, optional amsgrad).
#include <algorithm>
#include <cmath>

#include "backend/kernel_table.h"
#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, const char* name)
    : Optimizer(std::move(params), options.lr_), options_(options), decoupled_(decoupled), name_(name) {
  TG_CHECK(options.beta1_ >= 0 && options.beta1_ < 1 && options.beta2_ >= 0 && options.beta2_ < 1, name,
           ": betas must be in [0, 1), got (", options.beta1_, ", ", options.beta2_, ")");
  TG_CHECK(std::isfinite(options.eps_) && options.eps_ >= 0, name, ": invalid eps ", options.eps_);
  TG_CHECK(std::isfinite(options.weight_decay_) && options.weight_decay_ >= 0, name, ": invalid weight_decay ",
           options.weight_decay_);
  state_.resize(params_.size());
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, true, "AdamW") {}

// Parameters that share a device, a dtype and a step count share one set of hyperparameters (the
// bias corrections depend on the step), so each such group is one multi-tensor update.
void Adam::step() {
  NoGradGuard no_grad;
  struct Group {
    Device device;
    DType dtype;
    int64_t step;
    std::vector<backend::AdamTensors> tensors;
  };
  std::vector<Group> groups;
  // Every parameter is checked, and its state made to follow it (Note [state follows the
  // parameter], optim/param_state.h), before any is updated, so a bad one leaves the model and
  // the state unchanged.
  std::vector<State> followed(params_.size());
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TG_CHECK(p.is_contiguous(), name_, ": parameter ", i, " is not contiguous");
    grads[i] = g.contiguous();
    check_update_buffer(grads[i], p, name_, i, "gradient");
    const State& s = state_[i];
    State& f = followed[i];
    f.step = s.step;
    f.exp_avg = follow_parameter(s.exp_avg, p, name_, i, "exp_avg");
    f.exp_avg_sq = follow_parameter(s.exp_avg_sq, p, name_, i, "exp_avg_sq");
    f.max_exp_avg_sq = follow_parameter(s.max_exp_avg_sq, p, name_, i, "max_exp_avg_sq");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    State& s = state_[i];
    s = std::move(followed[i]);
    if (!s.exp_avg.defined()) {
      s.exp_avg = zeros_like(p);
      s.exp_avg_sq = zeros_like(p);
    }
    if (options_.amsgrad_ && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros_like(p);
    // Cannot fail after follow_parameter; kept as the kernels' guard against mismatched buffers.
    check_update_buffer(s.exp_avg, p, name_, i, "exp_avg");
    check_update_buffer(s.exp_avg_sq, p, name_, i, "exp_avg_sq");
    if (options_.amsgrad_) check_update_buffer(s.max_exp_avg_sq, p, name_, i, "max_exp_avg_sq");
    s.step += 1;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& gr) {
      return gr.device == p.device() && gr.dtype == p.dtype() && gr.step == s.step;
    });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{p.device(), p.dtype(), s.step, {}});
    group->tensors.push_back({p, g, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq});
  }
  for (const Group& group : groups) {
    const double step = static_cast<double>(group.step);
    math::AdamHyper hyper{lr_,
                          options_.beta1_,
                          options_.beta2_,
                          options_.eps_,
                          options_.weight_decay_,
                          decoupled_,
                          options_.amsgrad_,
                          1.0 - std::pow(options_.beta1_, step),
                          std::sqrt(1.0 - std::pow(options_.beta2_, step))};
    auto many = backend::kernels(group.device).adam_step_many;
    if (options_.foreach_ && many != nullptr) {
      many(group.tensors, hyper);
    } else {
      auto one = TG_KERNEL(group.device, adam_step);
      for (const backend::AdamTensors& t : group.tensors)
        one(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.max_exp_avg_sq, hyper);
    }
    for (const backend::AdamTensors& t : group.tensors) t.param.storage()->bump_version();
  }
}

std::vector<std::pair<std::string, Tensor>> Adam::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> state;
  for (size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    std::string prefix = std::to_string(i) + ".";
    state.emplace_back(prefix + "step", full({}, static_cast<double>(s.step), kFloat32));
    state.emplace_back(prefix + "exp_avg", s.exp_avg);
    state.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq);
    if (s.max_exp_avg_sq.defined()) state.emplace_back(prefix + "max_exp_avg_sq", s.max_exp_avg_sq);
  }
  return state;
}

void Adam::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries) {
  std::vector<State> loaded(params_.size());
  for (const auto& [name, t] : entries) {
    TG_CHECK(t.defined(), name_, ".load_state_dict: '", name, "' is undefined");
    const auto [index, field] = parse_state_key(name, params_.size(), name_);
    const Tensor& p = params_[index];
    if (field == "step") {
      loaded[index].step = parse_step(t, name, name_);
      continue;
    }
    TG_CHECK(t.sizes() == p.sizes(), name_, ".load_state_dict: '", name, "' has shape ", shape_str(t.sizes()),
             ", the parameter ", shape_str(p.sizes()));
    Tensor value = t.to(p.device(), p.dtype()).contiguous().clone();
    if (field == "exp_avg") loaded[index].exp_avg = value;
    else if (field == "exp_avg_sq") loaded[index].exp_avg_sq = value;
    else if (field == "max_exp_avg_sq") loaded[index].max_exp_avg_sq = value;
    else TG_CHECK(false, name_, ".load_state_dict: unexpected key '", name, "'");
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    const State& s = loaded[i];
    if (!s.exp_avg.defined() && !s.exp_avg_sq.defined()) continue;
    TG_CHECK(s.exp_avg.defined() && s.exp_avg_sq.defined() && s.step > 0 &&
                 (!options_.amsgrad_ || s.max_exp_avg_sq.defined()),
             name_, ".load_state_dict: incomplete state for parameter ", i);
  }
  state_ = loaded;
}

}  // namespace tapegrad::optim
