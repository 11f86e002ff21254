// Module bookkeeping: registration, traversal with dotted names, conversion, state dicts.
#include "tapegrad/nn/module.h"

#include <map>
#include <ostream>
#include <set>
#include <typeinfo>

#include "nn/type_name.h"
#include "tapegrad/autograd/grad_mode.h"

namespace tapegrad::nn {

std::string Module::name() const {
  return unqualified_type_name(typeid(*this));
}

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

void Module::check_no_cycle(const char* op, const std::string& name, const Module& module) const {
  // Note [no cycles]: every tree walk (parameters, state_dict, to, train, str) recurses into the
  // children, so a module inside its own subtree would recurse until the stack overflows. The
  // walk here is iterative and visits each module once, so a shared module costs nothing extra.
  std::set<const Module*> seen;
  std::vector<std::pair<std::string, const Module*>> stack{{"", &module}};
  while (!stack.empty()) {
    auto [path, m] = std::move(stack.back());
    stack.pop_back();
    if (m == this) {
      const std::string where = path.empty() ? std::string("it is this ") + this->name() + " itself"
                                             : "this " + this->name() + " is inside it, at '" + path + "'";
      ::tapegrad::detail::throw_error(::tapegrad::detail::str_cat(this->name(), ".", op, ": cannot attach '", name,
                                                                  "' (", module.name(),
                                                                  "): a module cannot contain itself, and ", where));
    }
    if (!seen.insert(m).second) continue;
    for (const auto& [child_name, child] : m->children_)
      stack.emplace_back(path.empty() ? child_name : path + "." + child_name, child.get());
  }
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  TG_CHECK(module != nullptr, this->name(), ": child module '", name, "' is null");
  check_no_cycle("register_module", name, *module);
  children_.emplace_back(name, std::move(module));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  TG_CHECK(module != nullptr, this->name(), ".replace_module: module '", name, "' is null");
  check_no_cycle("replace_module", name, *module);
  for (auto& entry : children_)
    if (entry.first == name) {
      entry.second = std::move(module);
      return;
    }
  ::tapegrad::detail::throw_error(
      ::tapegrad::detail::str_cat(this->name(), ".replace_module: there is no child module named '", name, "'"));
}

void Module::unregister_module(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      children_.erase(it);
      return;
    }
  ::tapegrad::detail::throw_error(
      ::tapegrad::detail::str_cat(this->name(), ".unregister_module: there is no child module named '", name, "'"));
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

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::shared_ptr<Module> Module::self_ptr() const {
  // The tree walks are const but hand out mutable modules, as named_children() always has.
  auto* self = const_cast<Module*>(this);
  if (std::shared_ptr<Module> owned = self->weak_from_this().lock()) return owned;
  return std::shared_ptr<Module>(std::shared_ptr<Module>(), self);  // aliasing, owns nothing
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  std::set<const Module*> seen;
  for (const auto& [name, child] : children_)
    if (seen.insert(child.get()).second) out.push_back(child);
  return out;
}

NamedModules Module::named_modules(const std::string& prefix) const {
  // Iterative pre-order walk (a deep tree must not exhaust the stack); the memo spans the whole
  // walk, so a module reached by two paths is listed once, under the first path, like PyTorch.
  NamedModules out;
  std::set<const Module*> seen;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> stack{{prefix, self_ptr()}};
  while (!stack.empty()) {
    auto [path, module] = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(module.get()).second) continue;
    const NamedModules& kids = module->children_;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.emplace_back(path.empty() ? it->first : path + "." + it->first, it->second);
    out.emplace_back(std::move(path), std::move(module));
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& entry : named_modules()) out.push_back(std::move(entry.second));
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (const std::shared_ptr<Module>& child : children()) child->apply(fn);
  fn(*this);
  return *this;
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

namespace {

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "\"" : ", \"") + k + "\"";
  return out;
}

// Splits on '\n' (an empty string gives no lines).
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  lines.push_back(text.substr(start));
  return lines;
}

// PyTorch's _addindent: every line but the first is indented by `spaces`.
std::string add_indent(const std::string& text, size_t spaces) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += std::string(spaces, ' ');
  }
  return out;
}

}  // namespace

LoadStateDictResult Module::load_state_dict(const StateDict& state, bool strict) {
  // Note [all errors at once]: like PyTorch, every problem is gathered before anything is
  // reported, so one failed load shows the whole mismatch between checkpoint and model. Unlike
  // PyTorch, nothing is copied when there is an error, so a failed load leaves the model as it was.
  StateDict own = named_parameters();
  for (auto& entry : named_buffers()) own.push_back(entry);
  std::map<std::string, const Tensor*> targets;
  for (const auto& [own_name, t] : own) targets.emplace(own_name, &t);

  LoadStateDictResult result;
  std::vector<std::string> duplicates, shape_errors;
  std::set<std::string> seen;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (const auto& [key, value] : state) {
    if (!seen.insert(key).second) {
      duplicates.push_back(key);
      continue;
    }
    auto it = targets.find(key);
    if (it == targets.end()) {
      result.unexpected_keys.push_back(key);
      continue;
    }
    const Tensor& target = *it->second;
    if (!value.defined() || value.sizes() != target.sizes()) {
      shape_errors.push_back("size mismatch for " + key + ": copying a param with shape " +
                             (value.defined() ? shape_str(value.sizes()) : std::string("undefined")) +
                             " from checkpoint, the shape in current model is " + shape_str(target.sizes()) + ".");
      continue;
    }
    copies.emplace_back(target, &value);
  }
  for (const auto& [own_name, t] : own)
    if (!seen.count(own_name)) result.missing_keys.push_back(own_name);

  std::vector<std::string> errors;
  if (strict && !result.missing_keys.empty())
    errors.push_back("Missing key(s) in state_dict: " + quoted_list(result.missing_keys) + ".");
  if (strict && !result.unexpected_keys.empty())
    errors.push_back("Unexpected key(s) in state_dict: " + quoted_list(result.unexpected_keys) + ".");
  if (!duplicates.empty()) errors.push_back("Duplicate key(s) in state_dict: " + quoted_list(duplicates) + ".");
  errors.insert(errors.end(), shape_errors.begin(), shape_errors.end());
  if (!errors.empty()) {
    std::string message = "load_state_dict: Error(s) in loading state_dict for " + name() + ":";
    for (const std::string& e : errors) message += "\n\t" + e;
    ::tapegrad::detail::throw_error(message);
  }

  NoGradGuard no_grad;
  for (auto& [target, value] : copies) target.copy_(*value);
  return result;
}

std::vector<std::string> Module::child_lines() const {
  std::vector<std::string> lines;
  for (const auto& [child_name, child] : children_) lines.push_back("(" + child_name + "): " + child->str());
  return lines;
}

std::string Module::str() const {
  // PyTorch's Module.__repr__: one extra_repr line stays inline; otherwise every extra_repr line
  // and every child goes on its own line, indented by two spaces per level.
  std::vector<std::string> extra = split_lines(extra_repr());
  std::vector<std::string> kids = child_lines();
  std::string out = name() + "(";
  if (extra.size() == 1 && kids.empty()) {
    out += extra[0];
  } else if (!extra.empty() || !kids.empty()) {
    for (const std::string& line : extra) out += "\n  " + line;
    for (const std::string& line : kids) out += "\n  " + add_indent(line, 2);
    out += "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  return os << module.str();
}

// Note [forward hooks]: the hooks live in a shared list so that a handle can outlive its module
// (a weak pointer then finds nothing); running over a copy lets a hook remove hooks mid-call.
RemovableHandle Module::register_forward_hook(ForwardHook hook) {
  TG_CHECK(static_cast<bool>(hook), name(), ".register_forward_hook: the hook is empty");
  detail::ForwardHookList& list = *forward_hooks_.list();
  const uint64_t id = list.next_id++;
  list.hooks.emplace_back(id, std::move(hook));
  return RemovableHandle(forward_hooks_.list(), id);
}

void Module::run_forward_hooks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  const std::shared_ptr<detail::ForwardHookList> list = forward_hooks_.list();
  const std::vector<std::pair<uint64_t, ForwardHook>> hooks = list->hooks;
  for (const auto& [id, hook] : hooks) {
    bool still_registered = false;
    for (const auto& entry : list->hooks) still_registered |= entry.first == id;
    if (still_registered) hook(*this, inputs, outputs);
  }
}

void RemovableHandle::remove() {
  if (std::shared_ptr<detail::ForwardHookList> list = list_.lock()) {
    auto& hooks = list->hooks;
    for (auto it = hooks.begin(); it != hooks.end(); ++it)
      if (it->first == id_) {
        hooks.erase(it);
        break;
      }
  }
  list_.reset();
}

}  // namespace tapegrad::nn
