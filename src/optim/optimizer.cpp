// The optimiser base: parameter groups, learning rate, zero_grad, and the group half of the state
// dict.
#include "tapegrad/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "optim/param_state.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::optim {

namespace {

const std::vector<std::string> kOptionNames{"lr",    "weight_decay", "momentum", "dampening", "nesterov",
                                            "beta1", "beta2",        "eps",      "amsgrad",   "initial_lr"};

size_t option_index(const std::string& option) {
  auto it = std::find(kOptionNames.begin(), kOptionNames.end(), option);
  TG_CHECK(it != kOptionNames.end(), "ParamGroup: unknown option '", option, "'");
  return static_cast<size_t>(it - kOptionNames.begin());
}

std::string where(const char* name, size_t group) {
  return std::string(name) + " (parameter group " + std::to_string(group) + ")";
}

constexpr const char* kGroupPrefix = "param_groups.";

}  // namespace

const std::vector<std::string>& ParamGroup::option_names() {
  return kOptionNames;
}

std::optional<double>& ParamGroup::slot(const std::string& option) {
  return options_[option_index(option)];
}
const std::optional<double>& ParamGroup::slot(const std::string& option) const {
  return options_[option_index(option)];
}

bool ParamGroup::has(const std::string& option) const {
  return slot(option).has_value();
}

double ParamGroup::get(const std::string& option) const {
  const std::optional<double>& v = slot(option);
  TG_CHECK(v.has_value(), "ParamGroup: option '", option,
           "' is not set (the optimiser of this group has no such option, ",
           "or the group is not in an optimiser yet)");
  return *v;
}

ParamGroup& ParamGroup::set(const std::string& option, double value) {
  slot(option) = value;
  return *this;
}

void ParamGroup::unset(const std::string& option) {
  slot(option).reset();
}

template <class Group>
Group& ParamGroupSpan<Group>::operator[](size_t i) const {
  TG_CHECK(i < size_, "param_groups: index ", i, " out of range for ", size_, " parameter groups");
  return data_[i];
}
template class ParamGroupSpan<ParamGroup>;
template class ParamGroupSpan<const ParamGroup>;

void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  // PyTorch's message: an empty list is almost always a model whose parameters() was empty or
  // already consumed, and an optimiser of nothing would silently train nothing.
  TG_CHECK(!groups.empty(), name_, ": optimizer got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t index = groups_.size();
  const std::string at = where(name_, index);
  std::set<const TensorImpl*> in_group;
  const std::set<const TensorImpl*> before = [&] {
    std::set<const TensorImpl*> s;
    for (const Tensor& p : params_) s.insert(p.impl());
    return s;
  }();
  const std::vector<Tensor>& params = group.params();
  for (size_t i = 0; i < params.size(); ++i) {
    TG_CHECK(params[i].defined(), at, ": parameter ", i, " is undefined");
    TG_CHECK(params[i].is_leaf() && params[i].requires_grad(), at, ": parameter ", i,
             " must be a leaf that requires grad");
    // Listed twice, a parameter would be updated twice per step with two sets of state (PyTorch
    // refuses this too).
    TG_CHECK(in_group.insert(params[i].impl()).second, at, ": parameter ", i,
             " appears more than once in the parameter list");
    TG_CHECK(before.count(params[i].impl()) == 0, at, ": parameter ", i,
             " is already in another parameter group (a parameter may be in only one group)");
  }
  const std::vector<std::string>& own = group_options();
  for (const std::string& option : ParamGroup::option_names()) {
    if (!group.has(option) || option == "initial_lr") continue;
    TG_CHECK(std::find(own.begin(), own.end(), option) != own.end(), at, ": the group sets '", option, "', which ",
             name_, " does not have");
  }
  fill_defaults(group);
  check_group(group, at);
  params_.insert(params_.end(), params.begin(), params.end());
  groups_.push_back(std::move(group));
}

void Optimizer::check_groups() const {
  for (size_t g = 0; g < groups_.size(); ++g) check_group(groups_[g], where(name_, g));
}

double Optimizer::lr() const {
  return groups_.front().lr();
}

void Optimizer::set_lr(double lr) {
  TG_CHECK(std::isfinite(lr) && lr >= 0, name_, ": invalid learning rate ", lr);
  for (ParamGroup& g : groups_) g.lr(lr);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

StateDict Optimizer::state_dict() const {
  StateDict state = param_state_dict();
  for (auto& entry : group_state_dict()) state.push_back(std::move(entry));
  return state;
}

StateDict Optimizer::group_state_dict() const {
  StateDict state;
  int64_t offset = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const std::string prefix = kGroupPrefix + std::to_string(g) + ".";
    // float64 like the options (exact up to 2^53), so a state dict converted to one dtype keeps it.
    std::vector<double> indices(group.params().size());
    for (double& i : indices) i = static_cast<double>(offset++);
    state.emplace_back(prefix + "params", tensor<double>(indices, {static_cast<int64_t>(indices.size())}));
    for (const std::string& option : group_options())
      state.emplace_back(prefix + option, full({}, group.get(option), kFloat64));
    if (group.has("initial_lr")) state.emplace_back(prefix + "initial_lr", full({}, group.initial_lr(), kFloat64));
  }
  return state;
}

// The groups a state dict brings: the current ones with the saved options, after checking that the
// saved layout (how many groups, which parameter indices in each) is this optimiser's.
std::vector<ParamGroup> Optimizer::load_groups(const StateDict& entries) const {
  const std::string ctx = std::string(name_) + ".load_state_dict";
  std::map<size_t, std::map<std::string, Tensor>> saved;
  for (const auto& [key, t] : entries) {
    if (key.rfind(kGroupPrefix, 0) != 0) continue;
    TG_CHECK(t.defined(), ctx, ": '", key, "' is undefined");
    const std::string rest = key.substr(std::string(kGroupPrefix).size());
    const size_t dot = rest.find('.');
    TG_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < rest.size() && dot <= 6 &&
                 std::all_of(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(dot),
                             [](char c) { return c >= '0' && c <= '9'; }),
             ctx, ": unexpected key '", key, "' (expected 'param_groups.<group index>.<field>')");
    const size_t g = std::stoul(rest.substr(0, dot));
    TG_CHECK(g < groups_.size(), ctx, ": the state dict has parameter group ", g, " ('", key,
             "') but this optimiser has ", groups_.size(), " parameter groups; build the optimiser with the ",
             "group layout the state dict was saved with");
    saved[g][rest.substr(dot + 1)] = t;
  }
  if (saved.empty()) return groups_;
  TG_CHECK(saved.size() == groups_.size(), ctx, ": the state dict has ", saved.size(),
           " parameter groups, this optimiser ", groups_.size());
  std::vector<ParamGroup> loaded = groups_;
  int64_t offset = 0;
  for (size_t g = 0; g < loaded.size(); ++g) {
    std::map<std::string, Tensor>& fields = saved[g];
    ParamGroup& group = loaded[g];
    const std::string prefix = kGroupPrefix + std::to_string(g) + ".";
    auto it = fields.find("params");
    TG_CHECK(it != fields.end(), ctx, ": '", prefix, "params' is missing");
    const Tensor& indices = it->second;
    const int64_t n = static_cast<int64_t>(group.params().size());
    bool same = indices.dim() == 1 && indices.numel() == n;
    if (same) {
      std::vector<double> values = indices.to(kCPU, kFloat64).tolist<double>();
      for (int64_t i = 0; i < n; ++i) same = same && values[static_cast<size_t>(i)] == static_cast<double>(offset + i);
    }
    TG_CHECK(same, ctx, ": parameter group ", g, " holds ", indices.numel(), " parameters in the state dict (", prefix,
             "params), here ", n, " (parameters ", offset, " to ", offset + n - 1,
             "); the group layout must be the one the state dict was saved with");
    offset += n;
    fields.erase(it);
    std::vector<std::string> wanted = group_options();
    wanted.push_back("initial_lr");
    for (const std::string& option : wanted) {
      auto f = fields.find(option);
      if (f == fields.end()) {
        TG_CHECK(option == "initial_lr", ctx, ": '", prefix, option, "' is missing");
        group.unset(option);
        continue;
      }
      TG_CHECK(f->second.numel() == 1, ctx, ": '", prefix, option, "' should hold one number, got shape ",
               shape_str(f->second.sizes()));
      const double value = f->second.item();
      if (option == "nesterov" || option == "amsgrad")
        TG_CHECK(value == 0.0 || value == 1.0, ctx, ": '", prefix, option, "' holds ", value, ", not 0 or 1");
      group.set(option, value);
      fields.erase(f);
    }
    TG_CHECK(fields.empty(), ctx, ": unexpected key '", prefix, fields.empty() ? "" : fields.begin()->first, "'");
    // OneCycleLR's last step (total_steps, reached by PyTorch's loop) can leave a negative
    // learning rate, as PyTorch's does; a checkpoint taken then must load. step() still refuses it.
    ParamGroup checked = group;
    if (std::isfinite(group.lr()) && group.lr() < 0) checked.lr(0);
    check_group(checked, ctx + ": parameter group " + std::to_string(g));
  }
  return loaded;
}

void Optimizer::load_state_dict(const StateDict& state) {
  std::vector<ParamGroup> groups = load_groups(state);
  StateDict per_param;
  for (const auto& entry : state)
    if (entry.first.rfind(kGroupPrefix, 0) != 0) per_param.push_back(entry);
  load_param_state(per_param, groups);
  groups_ = std::move(groups);
}

}  // namespace tapegrad::optim
