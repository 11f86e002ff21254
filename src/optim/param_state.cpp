// Optimiser state that follows its parameter (see param_state.h).
#include "optim/param_state.h"

#include <cmath>

namespace tapegrad::optim {

Tensor follow_parameter(const Tensor& state, const Tensor& p, const char* optimizer, size_t index, const char* field) {
  if (!state.defined()) return state;
  TG_CHECK(state.sizes() == p.sizes(), optimizer, ": parameter ", index, " has shape ", shape_str(p.sizes()),
           " but its ", field, " has shape ", shape_str(state.sizes()),
           "; the parameter was replaced by one of another shape since the last step (make a new optimiser "
           "for it)");
  if (state.dtype() == p.dtype() && state.device() == p.device() && state.is_contiguous()) return state;
  return state.to(p.device(), p.dtype()).contiguous();
}

void check_update_buffer(const Tensor& buffer, const Tensor& p, const char* optimizer, size_t index, const char* what) {
  TG_CHECK(buffer.sizes() == p.sizes() && buffer.dtype() == p.dtype() && buffer.device() == p.device() &&
               buffer.is_contiguous(),
           optimizer, ": parameter ", index, " is ", shape_str(p.sizes()), " ", p.dtype(), " on ", p.device(),
           " but its ", what, " is ", shape_str(buffer.sizes()), " ", buffer.dtype(), " on ", buffer.device(),
           buffer.is_contiguous() ? "" : " (not contiguous)");
}

std::pair<size_t, std::string> parse_state_key(const std::string& key, size_t num_params, const char* optimizer) {
  const size_t dot = key.find('.');
  TG_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < key.size(), optimizer, ".load_state_dict: unexpected key '",
           key, "' (expected '<parameter index>.<field>')");
  size_t index = 0;
  for (size_t i = 0; i < dot; ++i) {
    const char c = key[i];
    TG_CHECK(c >= '0' && c <= '9', optimizer, ".load_state_dict: unexpected key '", key,
             "' (the parameter index must be a number)");
    TG_CHECK(index <= (num_params + 9) / 10, optimizer, ".load_state_dict: '", key, "' names a parameter beyond the ",
             num_params, " it has");
    index = index * 10 + static_cast<size_t>(c - '0');
  }
  TG_CHECK(index < num_params, optimizer, ".load_state_dict: '", key, "' names parameter ", index, " of ", num_params);
  return {index, key.substr(dot + 1)};
}

int64_t parse_step(const Tensor& value, const std::string& key, const char* optimizer) {
  TG_CHECK(value.numel() == 1, optimizer, ".load_state_dict: '", key, "' should hold one step count, got shape ",
           shape_str(value.sizes()));
  const double step = value.item();
  // 2^53: every whole number up to it is exact in the float64 a step count is read as.
  TG_CHECK(std::isfinite(step) && step >= 1 && step <= 9007199254740992.0 && step == std::floor(step), optimizer,
           ".load_state_dict: '", key, "' holds ", step, ", not a step count (a whole number >= 1)");
  return static_cast<int64_t>(step);
}

}  // namespace tapegrad::optim
