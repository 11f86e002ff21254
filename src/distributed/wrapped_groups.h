// The parameter-group plumbing shared by the optimisers that wrap a local one built by an
// OptimizerFactory (ZeroRedundancyOptimizer, CPUOffloadOptimizer): their groups are the caller's,
// the local optimiser's hold other tensors with the same options.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tapegrad/optim/optimizer.h"

namespace tapegrad::distributed::detail {

inline constexpr const char* kGroupPrefix = "param_groups.";

// Whether a state-dict key is a group's ("param_groups.0.lr") rather than a parameter's.
inline bool is_group_entry(const std::string& key) {
  return key.rfind(kGroupPrefix, 0) == 0;
}

// `from`'s options on `to` (options `from` lacks are unset on `to`).
inline void copy_options(const optim::ParamGroup& from, optim::ParamGroup& to) {
  for (const std::string& option : optim::ParamGroup::option_names()) {
    if (from.has(option))
      to.set(option, from.get(option));
    else
      to.unset(option);
  }
}

// A group of `params` with `options`' options.
inline optim::ParamGroup with_params(std::vector<Tensor> params, const optim::ParamGroup& options) {
  optim::ParamGroup group(std::move(params));
  copy_options(options, group);
  return group;
}

}  // namespace tapegrad::distributed::detail
