// Gradient checkpointing, like torch.utils.checkpoint.checkpoint (use_reentrant=False where the two
// differ): trade compute for memory by keeping a block's inputs instead of its activations.
//
//   nn::Linear fc1(256, 256), fc2(256, 256);
//   Tensor h = checkpoint([&](const Tensor& x) { return fc2.forward(relu(fc1.forward(x))); }, x);
//   loss(h).backward();  // fc1/fc2's activations are recomputed here; their .grad() fill as usual
//
// checkpoint(fn, inputs...) runs fn once without recording (its intermediate tensors are freed as
// soon as fn no longer needs them) and saves only the inputs, the random numbers fn drew from any
// generator (the default one or its own, so dropout inside fn draws the same masks again) and the
// autocast state of every device kind. The outputs get one tape node; when backward reaches it, fn
// runs again under grad mode on detached copies of the inputs, its draws given the forward's
// numbers without touching any generator (Note [generator replay], src/core/generator_replay.h),
// under the forward's CPU and CUDA autocast state (backward may run outside the autocast region,
// as PyTorch recommends, and still recompute in the forward's precision), and
// the engine backpropagates through that recomputation: the inputs' gradients leave through the
// node, and the parameters fn uses (captured by reference or passed as inputs) accumulate their
// .grad() exactly as without checkpointing.
//
// - fn takes the tensors given (any number) and returns a Tensor or a std::vector<Tensor> (then
//   checkpoint returns the same); non-floating-point outputs never require grad.
// - The outputs require grad when an input requires grad or when fn used a tensor that does
//   (a captured parameter), as without checkpointing; with grad mode off checkpoint just calls fn.
// - fn is kept (copied) until the node is freed, so whatever it captures by reference must outlive
//   the backward pass. It must do the same work each time: the recomputation must return as many
//   tensors, of the same shapes, as the first run.
// - checkpoint_sequential (tapegrad/nn/checkpoint_sequential.h) splits an nn::Sequential into
//   checkpointed runs; nn::LSTM has its own options (LSTMOptions::checkpoint_layers/_segments).
// - Nested checkpoints, retain_graph (each backward recomputes again), inputs that do not require
//   grad, and CUDA tensors all work. An input modified in place before backward is an error.
// - Captured parameters get their gradient in .grad() from the recomputation's own backward pass,
//   so they are filled by backward() as usual (not restricted by any inputs list).
//
// Throws tapegrad::Error for an undefined input, fn returning no tensor or an undefined one, or a
// recomputation that differs from the first run: other outputs, or other random draws (e.g. a
// Dropout switched between train() and eval() after the forward; not checked when
// preserve_rng_state is false).
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The general form: fn of a list of tensors. preserve_rng_state = false skips recording and
// replaying the random draws (PyTorch's option of that name), for functions that draw none.
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               bool preserve_rng_state = true);

namespace detail {
template <class F, size_t... I>
auto call_with_tensors(F& fn, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  return fn(in[I]...);
}
}  // namespace detail

// fn(const Tensor&...) -> Tensor or std::vector<Tensor>, with one tensor argument per input.
template <class F, class... Ts,
          class = std::enable_if_t<sizeof...(Ts) >= 1 && (std::is_same_v<std::decay_t<Ts>, Tensor> && ...)>>
auto checkpoint(F fn, const Ts&... inputs) {
  using R = std::decay_t<std::invoke_result_t<F&, const Ts&...>>;
  static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, std::vector<Tensor>>,
                "checkpoint: fn must return a Tensor or a std::vector<Tensor>");
  CheckpointFunction wrapped = [fn = std::move(fn)](const std::vector<Tensor>& in) mutable -> std::vector<Tensor> {
    if constexpr (std::is_same_v<R, Tensor>)
      return {detail::call_with_tensors(fn, in, std::index_sequence_for<Ts...>{})};
    else
      return detail::call_with_tensors(fn, in, std::index_sequence_for<Ts...>{});
  };
  std::vector<Tensor> outputs = checkpoint(wrapped, std::vector<Tensor>{inputs...});
  if constexpr (std::is_same_v<R, Tensor>)
    return outputs.front();
  else
    return outputs;
}

}  // namespace tapegrad
