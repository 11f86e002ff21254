// Module bookkeeping: registration, traversal with dotted names, conversion, state dicts.
#include "tapegrad/nn/module.h"

#include <set>

#include "tapegrad/autograd/grad_mode.h"

namespace tapegrad::nn {

void Module::check_new_name(const std::string& name) const {
  TG_CHECK(!name.empty() && name.find('.') == std::string::npos, this->name(), ": invalid name '", name,
           "' (non-empty, no dots)");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  TG_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), this->name(), ": the name '", name,
           "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name);
  if (tensor.defined()) {
    TG_CHECK(tensor.is_leaf(), this->name(), ": parameter '", name, "' must be a leaf (use detach())");
    tensor.requires_grad_(requires_grad);
  }
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name);
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  TG_CHECK(module != nullptr, this->name(), ": child module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers, StateDict& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_)
    if (t.defined()) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, buffers, out);
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  collect("", recurse, false, out);
  return out;
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  collect("", recurse, true, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  // Each parameter once, like PyTorch's parameters(): a module registered under two names (tied
  // weights) must not hand an optimiser the same tensor twice.
  std::vector<Tensor> out;
  std::set<const TensorImpl*> seen;
  for (auto& [name, t] : named_parameters(recurse))
    if (seen.insert(t.impl()).second) out.push_back(t);
  return out;
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) t.set_data(t.to(device));
  for (auto& [name, t] : named_buffers()) t.set_data(t.to(device));
  return *this;
}

Module& Module::to(DType dtype) {
  TG_CHECK(is_floating_point(dtype), name(), ".to: parameters must stay floating point, got ", dtype);
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) t.set_data(t.to(dtype));
  for (auto& [name, t] : named_buffers())
    if (t.is_floating_point()) t.set_data(t.to(dtype));
  return *this;
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    if (set_to_none) {
      t.set_grad(Tensor());
    } else if (t.grad().defined()) {
      Tensor g = t.grad();
      g.zero_();
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : named_parameters()) out.emplace_back(name, t.detach());
  for (auto& [name, t] : named_buffers()) out.emplace_back(name, t.detach());
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = named_parameters();
  for (auto& entry : named_buffers()) own.push_back(entry);
  std::set<std::string> seen;
  NoGradGuard no_grad;
  for (const auto& [name, value] : state) {
    TG_CHECK(seen.insert(name).second, "load_state_dict: key '", name, "' appears twice");
    const Tensor* target = nullptr;
    for (auto& [own_name, t] : own)
      if (own_name == name) target = &t;
    if (target == nullptr) {
      TG_CHECK(!strict, "load_state_dict: unexpected key '", name, "' in the state dict of ", this->name());
      continue;
    }
    TG_CHECK(value.sizes() == target->sizes(), "load_state_dict: '", name, "' has shape ", shape_str(value.sizes()),
             " in the state dict but ", shape_str(target->sizes()), " in the model");
    Tensor dst = *target;
    dst.copy_(value);
  }
  if (strict) {
    for (auto& [own_name, t] : own)
      TG_CHECK(seen.count(own_name), "load_state_dict: missing key '", own_name, "' for ", this->name());
  }
}

void Module::str_into(std::string& out, int indent) const {
  out += name() + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& [child_name, child] : children_) {
      out += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + child_name + "): ";
      child->str_into(out, indent + 2);
      out += "\n";
    }
    out += std::string(static_cast<size_t>(indent), ' ');
  }
  out += ")";
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

}  // namespace tapegrad::nn
