// ModuleList and ModuleDict: the list and the dict are the module's children themselves, so
// replace_module() and state dicts always agree with what the container holds.
#include "tapegrad/nn/container.h"

#include "nn/type_name.h"

namespace tapegrad::nn {

namespace detail {
void throw_wrong_module_type(const char* container, const std::string& slot, const Module& module, const char* wanted) {
  ::tapegrad::detail::throw_error(::tapegrad::detail::str_cat(container, ": module ", slot, " is a ", module.name(),
                                                              ", not a ", unqualified_type_name_of(wanted)));
}
}  // namespace detail

// ---- ModuleList ---------------------------------------------------------------------------------

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  TG_CHECK(module != nullptr, "ModuleList.append: module is null");
  register_module(std::to_string(size()), std::move(module));
}

void ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  // All or nothing: a module that may not be attached is found before any is.
  for (size_t i = 0; i < modules.size(); ++i) {
    TG_CHECK(modules[i] != nullptr, "ModuleList.extend: module ", i, " is null");
    check_no_cycle("extend", std::to_string(size() + i), *modules[i]);
  }
  for (const auto& m : modules) push_back(m);
}

void ModuleList::insert(size_t index, std::shared_ptr<Module> module) {
  TG_CHECK(index <= size(), "ModuleList.insert: index ", index, " is out of range for ", size(), " modules");
  TG_CHECK(module != nullptr, "ModuleList.insert: module is null");
  // Checked before the tail is taken off, so a refused module leaves the list as it was.
  check_no_cycle("insert", std::to_string(index), *module);
  // Re-register the tail one place up, so names stay equal to positions.
  std::vector<std::shared_ptr<Module>> tail;
  while (size() > index) {
    tail.insert(tail.begin(), named_children().back().second);
    unregister_module(named_children().back().first);
  }
  push_back(std::move(module));
  for (auto& m : tail) push_back(std::move(m));
}

std::shared_ptr<Module> ModuleList::operator[](size_t index) const {
  TG_CHECK(index < size(), "ModuleList: index ", index, " is out of range for ", size(), " modules");
  return named_children()[index].second;
}

std::vector<std::string> ModuleList::child_lines() const {
  // PyTorch's ModuleList.__repr__: a run of children that print identically is one line,
  // "(first-last): n x repr".
  std::vector<std::string> lines;
  const NamedModules& kids = named_children();
  size_t start = 0;
  while (start < kids.size()) {
    const std::string repr = kids[start].second->str();
    size_t end = start;
    while (end + 1 < kids.size() && kids[end + 1].second->str() == repr) ++end;
    if (end == start)
      lines.push_back("(" + std::to_string(start) + "): " + repr);
    else
      lines.push_back("(" + std::to_string(start) + "-" + std::to_string(end) +
                      "): " + std::to_string(end - start + 1) + " x " + repr);
    start = end + 1;
  }
  return lines;
}

// ---- ModuleDict ---------------------------------------------------------------------------------

ModuleDict::ModuleDict(const NamedModules& modules) {
  update(modules);
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  TG_CHECK(module != nullptr, "ModuleDict: module '", key, "' is null");
  if (contains(key))
    replace_module(key, std::move(module));
  else
    register_module(key, std::move(module));
}

void ModuleDict::update(const NamedModules& modules) {
  for (const auto& [key, module] : modules) insert(key, module);
}

std::shared_ptr<Module> ModuleDict::pop(const std::string& key) {
  std::shared_ptr<Module> module = (*this)[key];
  unregister_module(key);
  return module;
}

void ModuleDict::clear() {
  while (!empty()) unregister_module(named_children().back().first);
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& entry : named_children())
    if (entry.first == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& entry : named_children()) out.push_back(entry.first);
  return out;
}

std::vector<std::shared_ptr<Module>> ModuleDict::values() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& entry : named_children()) out.push_back(entry.second);
  return out;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  for (const auto& entry : named_children())
    if (entry.first == key) return entry.second;
  std::string known;
  for (const auto& entry : named_children()) known += (known.empty() ? "'" : ", '") + entry.first + "'";
  ::tapegrad::detail::throw_error(::tapegrad::detail::str_cat("ModuleDict: no module under key '", key,
                                                              "' (keys: ", known.empty() ? "none" : known, ")"));
}

}  // namespace tapegrad::nn
