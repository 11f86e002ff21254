// SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD's rule).
#include <algorithm>
#include <cmath>

#include "backend/kernel_table.h"
#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr_), options_(options) {
  TG_CHECK(std::isfinite(options.momentum_) && options.momentum_ >= 0, "SGD: invalid momentum ", options.momentum_);
  TG_CHECK(std::isfinite(options.weight_decay_) && options.weight_decay_ >= 0, "SGD: invalid weight_decay ",
           options.weight_decay_);
  TG_CHECK(!options.nesterov_ || (options.momentum_ > 0 && options.dampening_ == 0),
           "SGD: nesterov needs momentum > 0 and zero dampening");
  momentum_buffers_.resize(params_.size());
}

// Parameters that share a device, a dtype and whether this is their buffer's first step share one
// set of hyperparameters, so each such group is one multi-tensor update.
void SGD::step() {
  NoGradGuard no_grad;
  struct Group {
    Device device;
    DType dtype;
    bool first_step;
    std::vector<backend::SgdTensors> tensors;
  };
  std::vector<Group> groups;
  // Every parameter is checked, and its buffer made to follow it (Note [state follows the
  // parameter], optim/param_state.h), before any is updated, so a bad one leaves the model and
  // the buffers unchanged.
  std::vector<Tensor> grads(params_.size()), followed(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TG_CHECK(p.is_contiguous(), "SGD: parameter ", i, " is not contiguous");
    grads[i] = g.contiguous();
    check_update_buffer(grads[i], p, "SGD", i, "gradient");
    followed[i] = follow_parameter(momentum_buffers_[i], p, "SGD", i, "momentum_buffer");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    momentum_buffers_[i] = std::move(followed[i]);
    bool first = false;
    if (options_.momentum_ != 0) {
      if (!momentum_buffers_[i].defined()) {
        momentum_buffers_[i] = empty_like(p);
        first = true;
      }
      // Cannot fail after follow_parameter; kept as the kernels' guard against mismatched buffers.
      check_update_buffer(momentum_buffers_[i], p, "SGD", i, "momentum_buffer");
    }
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& gr) {
      return gr.device == p.device() && gr.dtype == p.dtype() && gr.first_step == first;
    });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{p.device(), p.dtype(), first, {}});
    group->tensors.push_back({p, g, momentum_buffers_[i]});
  }
  for (const Group& group : groups) {
    math::SgdHyper hyper{lr_, options_.momentum_, options_.dampening_, options_.weight_decay_, options_.nesterov_,
                         group.first_step};
    auto many = backend::kernels(group.device).sgd_step_many;
    if (options_.foreach_ && many != nullptr) {
      many(group.tensors, hyper);
    } else {
      auto one = TG_KERNEL(group.device, sgd_step);
      for (const backend::SgdTensors& t : group.tensors) one(t.param, t.grad, t.momentum_buffer, hyper);
    }
    for (const backend::SgdTensors& t : group.tensors) t.param.storage()->bump_version();
  }
}

std::vector<std::pair<std::string, Tensor>> SGD::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> state;
  for (size_t i = 0; i < momentum_buffers_.size(); ++i)
    if (momentum_buffers_[i].defined()) state.emplace_back(std::to_string(i) + ".momentum_buffer", momentum_buffers_[i]);
  return state;
}

void SGD::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<Tensor> buffers(params_.size());
  for (const auto& [name, t] : state) {
    TG_CHECK(t.defined(), "SGD.load_state_dict: '", name, "' is undefined");
    const auto [index, field] = parse_state_key(name, params_.size(), "SGD");
    TG_CHECK(field == "momentum_buffer", "SGD.load_state_dict: unexpected key '", name, "'");
    TG_CHECK(t.sizes() == params_[index].sizes(), "SGD.load_state_dict: '", name, "' has shape ", shape_str(t.sizes()),
             ", the parameter ", shape_str(params_[index].sizes()));
    buffers[index] = t.to(params_[index].device(), params_[index].dtype()).contiguous().clone();
  }
  momentum_buffers_ = buffers;
}

}  // namespace tapegrad::optim
