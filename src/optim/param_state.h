// Per-parameter optimiser state that follows its parameter, and the check every update runs before
// it hands buffers to a kernel.
//
// Note [state follows the parameter]: a parameter can change under its optimiser (Module::to(dtype),
// Module::to(device), Tensor::set_data). The moments and momentum buffers are then converted to the
// parameter's new dtype and device, as PyTorch's Optimizer.load_state_dict casts them, so training
// continues with the same state; a parameter whose shape changed has state that means nothing for
// it, and the step refuses it. The kernels index every buffer with the parameter's element count,
// so a mismatched buffer there would be a heap overflow, not a wrong number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "tapegrad/core/tensor.h"

namespace tapegrad::optim {

// `state` on p's device and in p's dtype (itself when already so; undefined stays undefined).
// Throws tapegrad::Error naming the optimiser, the parameter index and both shapes when the shapes
// differ.
Tensor follow_parameter(const Tensor& state, const Tensor& p, const char* optimizer, size_t index, const char* field);

// Throws tapegrad::Error unless `buffer` (a gradient or a state tensor) is contiguous and has p's
// shape, dtype and device; `what` names it in the message.
void check_update_buffer(const Tensor& buffer, const Tensor& p, const char* optimizer, size_t index, const char* what);

// The parameter index and field of a state-dict key "<index>.<field>": the index must be all digits
// and name one of `num_params` parameters. Throws tapegrad::Error naming the optimiser and the key
// ("1x.exp_avg" and "abc.exp_avg" are errors, not parameter 1 and a std::stoul message).
std::pair<size_t, std::string> parse_state_key(const std::string& key, size_t num_params, const char* optimizer);

// A step count stored in a state dict: a one-element tensor holding a whole number in [1, 2^53].
// Throws tapegrad::Error naming the optimiser and the key otherwise (NaN, negative, 2.5, ...).
int64_t parse_step(const Tensor& value, const std::string& key, const char* optimizer);

}  // namespace tapegrad::optim
