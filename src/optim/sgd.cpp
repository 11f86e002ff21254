// SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD's rule), per group.
#include <algorithm>
#include <cmath>

#include "backend/kernel_table.h"
#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/cuda/graph.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) : Optimizer("SGD"), options_(options) {
  // One list is one group; an empty one is the empty-parameter-list error, not an empty group.
  TG_CHECK(!params.empty(), "SGD: optimizer got an empty parameter list");
  init_groups({ParamGroup(std::move(params))});
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults) : Optimizer("SGD"), options_(defaults) {
  init_groups(std::move(groups));
}

const std::vector<std::string>& SGD::group_options() const {
  static const std::vector<std::string> names{"lr", "momentum", "dampening", "weight_decay", "nesterov"};
  return names;
}

void SGD::fill_defaults(ParamGroup& g) const {
  if (!g.has("lr")) g.lr(options_.lr_);
  if (!g.has("momentum")) g.momentum(options_.momentum_);
  if (!g.has("dampening")) g.dampening(options_.dampening_);
  if (!g.has("weight_decay")) g.weight_decay(options_.weight_decay_);
  if (!g.has("nesterov")) g.nesterov(options_.nesterov_);
}

void SGD::check_group(const ParamGroup& g, const std::string& where) const {
  TG_CHECK(std::isfinite(g.lr()) && g.lr() >= 0, where, ": invalid learning rate ", g.lr());
  TG_CHECK(std::isfinite(g.momentum()) && g.momentum() >= 0, where, ": invalid momentum ", g.momentum());
  TG_CHECK(std::isfinite(g.dampening()), where, ": invalid dampening ", g.dampening());
  TG_CHECK(std::isfinite(g.weight_decay()) && g.weight_decay() >= 0, where, ": invalid weight_decay ",
           g.weight_decay());
  TG_CHECK(!g.nesterov() || (g.momentum() > 0 && g.dampening() == 0), where,
           ": nesterov needs momentum > 0 and zero dampening, got momentum ", g.momentum(), " and dampening ",
           g.dampening());
}

namespace {

math::SgdHyper hyper_of(const ParamGroup& g, bool first_step) {
  return {g.lr(), g.momentum(), g.dampening(), g.weight_decay(), g.nesterov(), first_step};
}

bool same_hyper(const math::SgdHyper& a, const math::SgdHyper& b) {
  return a.lr == b.lr && a.momentum == b.momentum && a.dampening == b.dampening && a.weight_decay == b.weight_decay &&
         a.nesterov == b.nesterov && a.first_step == b.first_step;
}

}  // namespace

// Parameters that share a device, a dtype and one set of hyperparameters (their group's, and
// whether this is their buffer's first step) are one multi-tensor update; groups with equal
// options share it, groups with different ones never do.
void SGD::step() {
  NoGradGuard no_grad;
  check_groups();
  const bool capturing = cuda::is_current_stream_capturing();
  momentum_buffers_.resize(params_.size());
  struct Bucket {
    Device device;
    DType dtype;
    math::SgdHyper hyper;
    std::vector<backend::SgdTensors> tensors;
  };
  std::vector<Bucket> buckets;
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
  size_t i = 0;
  for (const ParamGroup& group : groups_) {
    for (size_t k = 0; k < group.params().size(); ++k, ++i) {
      const Tensor& p = params_[i];
      const Tensor& g = grads[i];
      if (!g.defined()) continue;
      momentum_buffers_[i] = std::move(followed[i]);
      bool first = false;
      if (group.momentum() != 0) {
        if (!momentum_buffers_[i].defined()) {
          // Its first step copies the gradient in; a replay would do that again every time.
          TG_CHECK(!capturing, "SGD: parameter ", i,
                   " has no momentum buffer yet, and a captured step cannot create it (a replay would create it "
                   "again); run a warm-up step before capturing");
          momentum_buffers_[i] = empty_like(p);
          first = true;
        }
        // Cannot fail after follow_parameter; kept as the kernels' guard against mismatched buffers.
        check_update_buffer(momentum_buffers_[i], p, "SGD", i, "momentum_buffer");
      }
      const math::SgdHyper hyper = hyper_of(group, first);
      auto bucket = std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) {
        return b.device == p.device() && b.dtype == p.dtype() && same_hyper(b.hyper, hyper);
      });
      if (bucket == buckets.end()) bucket = buckets.insert(buckets.end(), Bucket{p.device(), p.dtype(), hyper, {}});
      bucket->tensors.push_back({p, g, momentum_buffers_[i]});
    }
  }
  for (const Bucket& bucket : buckets) {
    auto many = backend::kernels(bucket.device).sgd_step_many;
    if (options_.foreach_ && many != nullptr) {
      many(bucket.tensors, bucket.hyper);
    } else {
      auto one = TG_KERNEL(bucket.device, sgd_step);
      for (const backend::SgdTensors& t : bucket.tensors) one(t.param, t.grad, t.momentum_buffer, bucket.hyper);
    }
    for (const backend::SgdTensors& t : bucket.tensors) t.param.storage()->bump_version();
  }
}

StateDict SGD::param_state_dict() const {
  StateDict state;
  for (size_t i = 0; i < momentum_buffers_.size(); ++i)
    if (momentum_buffers_[i].defined())
      state.emplace_back(std::to_string(i) + ".momentum_buffer", momentum_buffers_[i]);
  return state;
}

void SGD::load_param_state(const StateDict& state, const std::vector<ParamGroup>& /*groups*/) {
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
