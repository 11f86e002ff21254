// ModuleList and ModuleDict: modules held in a list or by key so their parameters are registered
// (and saved, moved, printed) with the owner, like PyTorch's nn.ModuleList and nn.ModuleDict.
// Neither has a forward(); the owner decides how to call what they hold.
//
//   auto blocks = register_module("blocks", nn::ModuleList(nn::Linear(8, 8), nn::Linear(8, 8)));
//   for (const auto& block : *blocks) x = relu(std::static_pointer_cast<nn::Linear>(block)->forward(x));
//   auto heads = register_module("heads", nn::ModuleDict({{"cls", std::make_shared<nn::Linear>(8, 3)}}));
#pragma once

#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tapegrad/nn/module.h"

namespace tapegrad::nn {

namespace detail {
// Throws tapegrad::Error naming the container, the slot and both types when `module` is not an M.
[[noreturn]] void throw_wrong_module_type(const char* container, const std::string& slot, const Module& module,
                                          const char* wanted);
template <class M>
std::shared_ptr<M> checked_cast(const char* container, const std::string& slot, const std::shared_ptr<Module>& module) {
  std::shared_ptr<M> typed = std::dynamic_pointer_cast<M>(module);
  if (!typed) throw_wrong_module_type(container, slot, *module, typeid(M).name());
  return typed;
}
}  // namespace detail

// Children named "0", "1", ... in order. Printing folds runs of identical children like PyTorch
// ("(0-11): 12 x Linear(...)").
class ModuleList : public Module {
  template <class M>
  using EnableIfModule = std::enable_if_t<std::is_base_of<Module, std::decay_t<M>>::value>;
  template <class... Ms>
  static constexpr bool is_copy_argument() {
    if constexpr (sizeof...(Ms) == 1) return (std::is_same<std::decay_t<Ms>, ModuleList>::value && ...);
    return false;
  }

 public:
  // Iterates the modules (not their names), in order.
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::shared_ptr<Module>;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;
    explicit const_iterator(NamedModules::const_iterator it) : it_(it) {}
    reference operator*() const { return it_->second; }
    pointer operator->() const { return &it_->second; }
    const_iterator& operator++() {
      ++it_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator old = *this;
      ++it_;
      return old;
    }
    bool operator==(const const_iterator& other) const { return it_ == other.it_; }
    bool operator!=(const const_iterator& other) const { return it_ != other.it_; }

   private:
    NamedModules::const_iterator it_;
  };

  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  // From module values and/or shared_ptrs, like Sequential's constructor.
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) && !is_copy_argument<Ms...>()>>
  explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  std::string name() const override { return "ModuleList"; }

  // PyTorch's append: adds at the end, named by its position.
  void push_back(std::shared_ptr<Module> module);
  template <class M, class = EnableIfModule<M>>
  void push_back(M&& module) {
    push_back(std::shared_ptr<Module>(std::make_shared<std::decay_t<M>>(std::forward<M>(module))));
  }
  void extend(const std::vector<std::shared_ptr<Module>>& modules);
  // Inserts before position `index` (0 <= index <= size()); later modules are renamed one up.
  void insert(size_t index, std::shared_ptr<Module> module);

  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  // The module at `index`; throws when out of range.
  std::shared_ptr<Module> operator[](size_t index) const;
  // The module at `index` as an M (shared_ptr or reference); throws when out of range or not an M.
  template <class M>
  std::shared_ptr<M> ptr(size_t index) const {
    return detail::checked_cast<M>("ModuleList", std::to_string(index), (*this)[index]);
  }
  template <class M>
  M& at(size_t index) const {
    return *ptr<M>(index);
  }
  const_iterator begin() const { return const_iterator(named_children().begin()); }
  const_iterator end() const { return const_iterator(named_children().end()); }

 protected:
  std::vector<std::string> child_lines() const override;
};

// Children under string keys, in insertion order; assigning to an existing key replaces the
// module in its place (PyTorch's ModuleDict.__setitem__). Keys follow the module naming rules
// (non-empty, no '.').
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  // ModuleDict({{"encoder", encoder}, {"decoder", decoder}})
  explicit ModuleDict(const NamedModules& modules);
  std::string name() const override { return "ModuleDict"; }

  // Adds `module` under `key`, or replaces the module already there.
  void insert(const std::string& key, std::shared_ptr<Module> module);
  template <class M, class = std::enable_if_t<std::is_base_of<Module, std::decay_t<M>>::value>>
  void insert(const std::string& key, M&& module) {
    insert(key, std::shared_ptr<Module>(std::make_shared<std::decay_t<M>>(std::forward<M>(module))));
  }
  // insert() for each pair, in order.
  void update(const NamedModules& modules);
  // Removes and returns the module under `key`; throws when there is none.
  std::shared_ptr<Module> pop(const std::string& key);
  void clear();

  bool contains(const std::string& key) const;
  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  std::vector<std::string> keys() const;
  std::vector<std::shared_ptr<Module>> values() const;
  const NamedModules& items() const { return named_children(); }
  // The module under `key`; throws naming the key when there is none.
  std::shared_ptr<Module> operator[](const std::string& key) const;
  template <class M>
  std::shared_ptr<M> ptr(const std::string& key) const {
    return detail::checked_cast<M>("ModuleDict", "'" + key + "'", (*this)[key]);
  }
  template <class M>
  M& at(const std::string& key) const {
    return *ptr<M>(key);
  }
  NamedModules::const_iterator begin() const { return named_children().begin(); }
  NamedModules::const_iterator end() const { return named_children().end(); }
};

}  // namespace tapegrad::nn
