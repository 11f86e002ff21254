// Adam and AdamW (torch.optim.Adam/AdamW's rule, bias correction included, optional amsgrad), per
// group.
#include <algorithm>
#include <cmath>

#include "backend/kernel_table.h"
#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/cuda/graph.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::optim {

namespace {

std::vector<ParamGroup> one_group(std::vector<Tensor> params, const char* name) {
  // One list is one group; an empty one is the empty-parameter-list error, not an empty group.
  TG_CHECK(!params.empty(), name, ": optimizer got an empty parameter list");
  return {ParamGroup(std::move(params))};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(one_group(std::move(params), "Adam"), options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Adam(std::move(groups), defaults, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, const char* name)
    : Optimizer(name), options_(options), decoupled_(decoupled) {
  init_groups(std::move(groups));
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params), "AdamW"), options, true, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions defaults) : Adam(std::move(groups), defaults, true, "AdamW") {}

const std::vector<std::string>& Adam::group_options() const {
  static const std::vector<std::string> names{"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"};
  return names;
}

void Adam::fill_defaults(ParamGroup& g) const {
  if (!g.has("lr")) g.lr(options_.lr_);
  // Betas are one option, as in PyTorch: a group that sets neither takes both defaults.
  if (!g.has("beta1")) g.set("beta1", options_.beta1_);
  if (!g.has("beta2")) g.set("beta2", options_.beta2_);
  if (!g.has("eps")) g.eps(options_.eps_);
  if (!g.has("weight_decay")) g.weight_decay(options_.weight_decay_);
  if (!g.has("amsgrad")) g.amsgrad(options_.amsgrad_);
}

void Adam::check_group(const ParamGroup& g, const std::string& where) const {
  const auto [beta1, beta2] = g.betas();
  TG_CHECK(std::isfinite(g.lr()) && g.lr() >= 0, where, ": invalid learning rate ", g.lr());
  TG_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, where, ": betas must be in [0, 1), got (", beta1, ", ",
           beta2, ")");
  TG_CHECK(std::isfinite(g.eps()) && g.eps() >= 0, where, ": invalid eps ", g.eps());
  TG_CHECK(std::isfinite(g.weight_decay()) && g.weight_decay() >= 0, where, ": invalid weight_decay ",
           g.weight_decay());
}

namespace {

math::AdamHyper hyper_of(const ParamGroup& g, bool decoupled, int64_t step) {
  const auto [beta1, beta2] = g.betas();
  const math::AdamHyper h{g.lr(), beta1, beta2, g.eps(), g.weight_decay(), decoupled, g.amsgrad(), 0.0, 0.0};
  return math::adam_hyper_at_step(h, static_cast<double>(step));
}

// Equal options and step give equal bias corrections, so those need no comparing.
bool same_hyper(const math::AdamHyper& a, int64_t a_step, const math::AdamHyper& b, int64_t b_step) {
  return a_step == b_step && a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
         a.weight_decay == b.weight_decay && a.amsgrad == b.amsgrad;
}

}  // namespace

// Parameters that share a device, a dtype, a step count (the bias corrections depend on it) and
// their group's options are one multi-tensor update; groups with different options never share one.
void Adam::step() {
  NoGradGuard no_grad;
  const char* name = this->name();
  check_groups();
  // Under capture the host's step count and bias corrections would be baked into the graph.
  const bool capturing = cuda::is_current_stream_capturing();
  TG_CHECK(!capturing || options_.capturable_, name,
           ": step() is being captured in a CUDA graph, which needs AdamOptions().capturable(true) (the step "
           "count and bias corrections must live on the device to advance on every replay)");
  state_.resize(params_.size());
  struct Bucket {
    Device device;
    DType dtype;
    int64_t step;
    math::AdamHyper hyper;
    std::vector<backend::AdamTensors> tensors;
  };
  std::vector<Bucket> buckets;
  // Every parameter is checked, and its state made to follow it (Note [state follows the
  // parameter], optim/param_state.h), before any is updated, so a bad one leaves the model and
  // the state unchanged.
  std::vector<State> followed(params_.size());
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TG_CHECK(p.is_contiguous(), name, ": parameter ", i, " is not contiguous");
    grads[i] = g.contiguous();
    check_update_buffer(grads[i], p, name, i, "gradient");
    const State& s = state_[i];
    State& f = followed[i];
    f.step = s.step;
    f.exp_avg = follow_parameter(s.exp_avg, p, name, i, "exp_avg");
    f.exp_avg_sq = follow_parameter(s.exp_avg_sq, p, name, i, "exp_avg_sq");
    f.max_exp_avg_sq = follow_parameter(s.max_exp_avg_sq, p, name, i, "max_exp_avg_sq");
    if (s.step_count.defined() && s.step_count.device() != p.device())
      f.step_count = s.step_count.to(p.device());
    else
      f.step_count = s.step_count;
    TG_CHECK(!capturing || (f.exp_avg.defined() && f.step_count.defined()), name, ": parameter ", i,
             " has no state yet, and a captured step cannot create it (a replay would create it again); run a "
             "warm-up step before capturing");
  }
  size_t i = 0;
  for (const ParamGroup& group : groups_) {
    const bool amsgrad = group.amsgrad();
    for (size_t k = 0; k < group.params().size(); ++k, ++i) {
      const Tensor& p = params_[i];
      const Tensor& g = grads[i];
      if (!g.defined()) continue;
      State& s = state_[i];
      s = std::move(followed[i]);
      if (!s.exp_avg.defined()) {
        s.exp_avg = zeros_like(p);
        s.exp_avg_sq = zeros_like(p);
      }
      if (amsgrad && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros_like(p);
      if (options_.capturable_ && !s.step_count.defined())
        s.step_count = full({}, static_cast<double>(s.step), TensorOptions().dtype(kFloat32).device(p.device()));
      // Cannot fail after follow_parameter; kept as the kernels' guard against mismatched buffers.
      check_update_buffer(s.exp_avg, p, name, i, "exp_avg");
      check_update_buffer(s.exp_avg_sq, p, name, i, "exp_avg_sq");
      if (amsgrad) check_update_buffer(s.max_exp_avg_sq, p, name, i, "max_exp_avg_sq");
      s.step += 1;
      const math::AdamHyper hyper = hyper_of(group, decoupled_, s.step);
      auto bucket = std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) {
        return b.device == p.device() && b.dtype == p.dtype() && same_hyper(b.hyper, b.step, hyper, s.step);
      });
      if (bucket == buckets.end())
        bucket = buckets.insert(buckets.end(), Bucket{p.device(), p.dtype(), s.step, hyper, {}});
      bucket->tensors.push_back({p, g, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq, s.step_count});
    }
  }
  for (const Bucket& bucket : buckets) {
    auto many = backend::kernels(bucket.device).adam_step_many;
    if (options_.foreach_ && many != nullptr) {
      many(bucket.tensors, bucket.hyper);
    } else if (options_.capturable_) {  // the step counts are updated by the multi-tensor slot only
      auto one = TG_KERNEL(bucket.device, adam_step_many);
      for (const backend::AdamTensors& t : bucket.tensors) one({t}, bucket.hyper);
    } else {
      auto one = TG_KERNEL(bucket.device, adam_step);
      for (const backend::AdamTensors& t : bucket.tensors)
        one(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.max_exp_avg_sq, bucket.hyper);
    }
    for (const backend::AdamTensors& t : bucket.tensors) t.param.storage()->bump_version();
  }
}

StateDict Adam::param_state_dict() const {
  StateDict state;
  for (size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    std::string prefix = std::to_string(i) + ".";
    // Capturable: the device's count, which graph replays advanced without the host knowing.
    state.emplace_back(prefix + "step", s.step_count.defined() ? s.step_count.to(kCPU).clone()
                                                               : full({}, static_cast<double>(s.step), kFloat32));
    state.emplace_back(prefix + "exp_avg", s.exp_avg);
    state.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq);
    if (s.max_exp_avg_sq.defined()) state.emplace_back(prefix + "max_exp_avg_sq", s.max_exp_avg_sq);
  }
  return state;
}

void Adam::load_param_state(const StateDict& entries, const std::vector<ParamGroup>& groups) {
  const char* name = this->name();
  std::vector<State> loaded(params_.size());
  for (const auto& [key, t] : entries) {
    TG_CHECK(t.defined(), name, ".load_state_dict: '", key, "' is undefined");
    const auto [index, field] = parse_state_key(key, params_.size(), name);
    const Tensor& p = params_[index];
    if (field == "step") {
      loaded[index].step = parse_step(t, key, name);
      continue;
    }
    TG_CHECK(t.sizes() == p.sizes(), name, ".load_state_dict: '", key, "' has shape ", shape_str(t.sizes()),
             ", the parameter ", shape_str(p.sizes()));
    Tensor value = t.to(p.device(), p.dtype()).contiguous().clone();
    if (field == "exp_avg")
      loaded[index].exp_avg = value;
    else if (field == "exp_avg_sq")
      loaded[index].exp_avg_sq = value;
    else if (field == "max_exp_avg_sq")
      loaded[index].max_exp_avg_sq = value;
    else
      TG_CHECK(false, name, ".load_state_dict: unexpected key '", key, "'");
  }
  size_t i = 0;
  for (const ParamGroup& group : groups) {
    for (size_t k = 0; k < group.params().size(); ++k, ++i) {
      const State& s = loaded[i];
      if (!s.exp_avg.defined() && !s.exp_avg_sq.defined()) continue;
      TG_CHECK(s.exp_avg.defined() && s.exp_avg_sq.defined() && s.step > 0 &&
                   (!group.amsgrad() || s.max_exp_avg_sq.defined()),
               name, ".load_state_dict: incomplete state for parameter ", i);
    }
  }
  if (options_.capturable_) {
    for (size_t k = 0; k < loaded.size(); ++k)
      if (loaded[k].exp_avg.defined())
        loaded[k].step_count =
            full({}, static_cast<double>(loaded[k].step), TensorOptions().dtype(kFloat32).device(params_[k].device()));
  }
  state_ = loaded;
}

}  // namespace tapegrad::optim
