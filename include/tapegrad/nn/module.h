// Module: the base of every layer. It owns named parameters, buffers and child modules, moves
// them between devices and dtypes, walks the module tree in PyTorch's order, prints it like
// PyTorch's repr, and saves and loads it as a state dict with PyTorch's dotted names ("0.weight",
// "lstm.weight_ih_l0"). See docs/modules.md for a walk-through.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Named tensors in a fixed order (the order of registration).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

namespace nn {

class Module;

// (name, module) pairs in registration or traversal order.
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// A forward hook sees the module, its inputs and its outputs after each call through the module's
// operator() (PyTorch's register_forward_hook). Unlike PyTorch's, it cannot replace the output.
using ForwardHook =
    std::function<void(Module& module, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)>;

namespace detail {
struct ForwardHookList {
  std::vector<std::pair<uint64_t, ForwardHook>> hooks;
  uint64_t next_id = 1;
};
// Holds a module's hooks. A copied module gets its own copy of the hooks (the handles keep
// referring to the original's); a moved one takes them along, handles included.
class ForwardHookSlot {
 public:
  ForwardHookSlot() : list_(std::make_shared<ForwardHookList>()) {}
  ForwardHookSlot(const ForwardHookSlot& other) : list_(std::make_shared<ForwardHookList>(*other.list_)) {}
  ForwardHookSlot& operator=(const ForwardHookSlot& other) {
    if (this != &other) list_ = std::make_shared<ForwardHookList>(*other.list_);
    return *this;
  }
  ForwardHookSlot(ForwardHookSlot&& other) noexcept : list_(std::move(other.list_)) {
    other.list_ = std::make_shared<ForwardHookList>();
  }
  ForwardHookSlot& operator=(ForwardHookSlot&& other) noexcept {
    std::swap(list_, other.list_);
    return *this;
  }
  const std::shared_ptr<ForwardHookList>& list() const { return list_; }

 private:
  std::shared_ptr<ForwardHookList> list_;
};
}  // namespace detail

// Returned by register_forward_hook: remove() unregisters the hook (PyTorch's RemovableHandle).
// Removing twice, or after the module is gone, does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  void remove();

 private:
  friend class Module;
  RemovableHandle(std::weak_ptr<detail::ForwardHookList> list, uint64_t id) : list_(std::move(list)), id_(id) {}
  std::weak_ptr<detail::ForwardHookList> list_;
  uint64_t id_ = 0;
};

// What load_state_dict(state, strict = false) skipped (PyTorch's _IncompatibleKeys).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the model, absent from the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, absent from the model
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;
  // The type's name, for printing and error messages: the unqualified class name of the dynamic
  // type ("Linear", "MyNet"), like PyTorch's type(self).__name__. Override to print another name.
  virtual std::string name() const;

  // --- registration (public, like PyTorch's and LibTorch's register_*) -----------------------
  // Names are non-empty, contain no '.', and are unique across this module's parameters, buffers
  // and children; a bad or taken name throws tapegrad::Error.
  // Registers and returns the tensor (a defined parameter must be a leaf and is set to require
  // grad when requires_grad). An undefined tensor registers an absent optional parameter.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  // Registers a child and returns it. Takes a shared_ptr (shared with the caller) or a module
  // value, which is moved into a new shared_ptr: register_module("fc", nn::Linear(4, 2)).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of<Module, M>::value, "register_module: M must derive from nn::Module");
    add_child(name, module);
    return module;
  }
  template <class M, class = std::enable_if_t<std::is_base_of<Module, std::decay_t<M>>::value>>
  std::shared_ptr<std::decay_t<M>> register_module(const std::string& name, M&& module) {
    return register_module(name, std::make_shared<std::decay_t<M>>(std::forward<M>(module)));
  }
  // A module may appear in the tree more than once (shared, as with tied weights), but never inside
  // itself: registering (or replacing with) a module whose subtree holds this module throws.
  // Puts `module` in the place of the child `name` (same position); throws if there is none.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);
  // Removes the child `name`; throws if there is none.
  void unregister_module(const std::string& name);

  // --- traversal ------------------------------------------------------------------------------
  // Own parameters first, then each child's, with dotted names. parameters() lists each tensor once
  // (a module registered under two names shares its parameters); named_parameters() lists every name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  StateDict named_parameters(bool recurse = true) const;
  StateDict named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  // Direct children in registration order, every name (also a module registered twice).
  const NamedModules& named_children() const { return children_; }
  // Direct children, each module once (the first name wins), like PyTorch's children().
  std::vector<std::shared_ptr<Module>> children() const;
  // This module (named "", or `prefix`) and then every descendant, depth first in registration
  // order, each module once however many names reach it (PyTorch's named_modules()). Names are
  // dotted paths ("encoder.layers.0"). The entry for this module owns it when it is held by a
  // shared_ptr; a module on the stack gets a non-owning pointer, valid while the module lives.
  NamedModules named_modules(const std::string& prefix = "") const;
  std::vector<std::shared_ptr<Module>> modules() const;
  // Calls fn on every child's subtree (children() order, children first) and then on this module,
  // like PyTorch's apply(); typical use is custom initialisation.
  Module& apply(const std::function<void(Module&)>& fn);

  // --- conversion and mode --------------------------------------------------------------------
  // Converts every parameter and buffer in place: handles held elsewhere (an optimiser's list)
  // see the moved tensors. Gradients are cleared.
  Module& to(Device device);
  Module& to(DType dtype);
  // Training mode (dropout active) or evaluation mode, for this module and all children.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  void zero_grad(bool set_to_none = true);

  // --- state dicts ----------------------------------------------------------------------------
  // Parameters then buffers, with dotted names; the tensors are detached aliases (no copy).
  StateDict state_dict() const;
  // Copies values in, converted to each parameter's dtype and device. Every problem is collected
  // and reported in one tapegrad::Error, like PyTorch: with strict, every missing and unexpected
  // key; always, every shape mismatch and every key given twice. On error nothing is copied.
  // Returns the keys that non-strict loading skipped.
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);

  // The module tree as PyTorch prints a model:
  //   Sequential(
  //     (0): Linear(in_features=784, out_features=512, bias=true)
  //     (1): ReLU()
  //   )
  std::string str() const;

  // --- forward hooks --------------------------------------------------------------------------
  // Registers `hook` to run after every call of this module through its operator() (not a direct
  // call of forward(), as in PyTorch, where hooks run in __call__). Hooks run in registration
  // order; a hook may remove itself or another one while running. Not thread-safe: register and
  // remove hooks while no other thread calls the module.
  RemovableHandle register_forward_hook(ForwardHook hook);
  bool has_forward_hooks() const { return !forward_hooks_.list()->hooks.empty(); }

 protected:
  // Throws, naming `op`, the child's name and both modules, when attaching `module` under `name`
  // would put this module inside its own subtree (`module` is this module or an ancestor of it).
  void check_no_cycle(const char* op, const std::string& name, const Module& module) const;
  // Called by operator() of the module types after forward(): runs the registered hooks.
  void run_forward_hooks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
  // Extra text inside the parentheses of str(), e.g. "in_features=4, out_features=2, bias=true".
  // Several lines are allowed.
  virtual std::string extra_repr() const { return ""; }
  // The "(name): child" lines of str(); ModuleList overrides it to fold repeated children.
  virtual std::vector<std::string> child_lines() const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, bool recurse, bool buffers, StateDict& out) const;
  std::shared_ptr<Module> self_ptr() const;

  StateDict parameters_;
  StateDict buffers_;
  NamedModules children_;
  bool training_ = true;
  detail::ForwardHookSlot forward_hooks_;
};

// Writes module.str().
std::ostream& operator<<(std::ostream& os, const Module& module);

// A module that maps one tensor to one tensor, so it can sit in a Sequential.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& input) = 0;
  // forward(input), then the forward hooks (see register_forward_hook).
  Tensor operator()(const Tensor& input) {
    Tensor output = forward(input);
    if (has_forward_hooks()) run_forward_hooks({input}, {output});
    return output;
  }
};

}  // namespace nn
}  // namespace tapegrad
