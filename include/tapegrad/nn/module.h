// Module: the base of every layer. It owns named parameters, buffers and child modules, moves
// them between devices and dtypes, and saves and loads them as a state dict with PyTorch's dotted
// names ("0.weight", "lstm.weight_ih_l0").
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Named tensors in a fixed order (the order of registration).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

namespace nn {

class Module {
 public:
  virtual ~Module() = default;
  // The type's name, for printing ("Linear", "Sequential").
  virtual std::string name() const = 0;

  // Own parameters first, then each child's, with dotted names. parameters() lists each tensor once
  // (a module registered under two names shares its parameters); named_parameters() lists every name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  StateDict named_parameters(bool recurse = true) const;
  StateDict named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }

  // Converts every parameter and buffer in place: handles held elsewhere (an optimiser's list)
  // see the moved tensors. Gradients are cleared.
  Module& to(Device device);
  Module& to(DType dtype);
  // Training mode (dropout active) or evaluation mode, for this module and all children.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  void zero_grad(bool set_to_none = true);

  // Parameters then buffers, with dotted names; the tensors are detached aliases (no copy).
  StateDict state_dict() const;
  // Copies values in. With strict, a missing or unexpected key is an Error; a shape mismatch
  // always is. Values are converted to each parameter's dtype and device.
  void load_state_dict(const StateDict& state, bool strict = true);

  std::string str() const;  // one line per module, indented like PyTorch's repr

 protected:
  // Registers and returns the tensor (a parameter is made a leaf that requires grad).
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Extra text inside the parentheses of str(), e.g. "in_features=4, out_features=2, bias=true".
  virtual std::string extra_repr() const { return ""; }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, bool recurse, bool buffers, StateDict& out) const;
  void str_into(std::string& out, int indent) const;

  StateDict parameters_;
  StateDict buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A module that maps one tensor to one tensor, so it can sit in a Sequential.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& input) = 0;
  Tensor operator()(const Tensor& input) { return forward(input); }
};

}  // namespace nn
}  // namespace tapegrad
