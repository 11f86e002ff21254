// Optimiser state that follows its parameter (see param_state.h).
#include "optim/param_state.h"

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

}  // namespace tapegrad::optim
