// Hooks on leaf tensors that run when backward has accumulated a gradient into them, as PyTorch's
// Tensor.register_post_accumulate_grad_hook. DistributedDataParallel uses them to start a bucket's
// all-reduce as soon as its last gradient is ready.
//
//   auto handle = autograd::register_post_accumulate_grad_hook(weight, [](const Tensor& leaf) {
//     std::cout << leaf.grad().sum().item() << "\n";
//   });
//   loss.backward();   // the hook runs once, after weight.grad() holds this backward's gradient
//   handle.remove();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tapegrad/core/tensor.h"

namespace tapegrad::autograd {

// Called with the leaf itself; leaf.grad() is the gradient accumulated so far (this backward's
// contribution included). It runs on the thread running backward, on the CUDA stream the
// gradient was made on. It may read or change leaf.grad(); an exception it throws leaves
// backward() and reaches its caller.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// The hooks of one leaf, in registration order (kept by TensorImpl, read under its autograd_mutex).
struct PostAccumulateGradHooks {
  uint64_t next_id = 0;
  std::vector<std::pair<uint64_t, std::shared_ptr<PostAccumulateGradHook>>> hooks;
};

// Removes the hook it was returned for; removing twice, or after the tensor is gone, does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<TensorImpl> tensor, uint64_t id) : tensor_(std::move(tensor)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<TensorImpl> tensor_;
  uint64_t id_ = 0;
};

// Runs `hook` after every backward pass that accumulates a gradient into `leaf` (once per backward,
// however many times the graph used the leaf). Hooks run in the order they were registered, and
// stay registered across Module::to / set_data. Throws tapegrad::Error for an undefined tensor,
// one that does not require grad, a non-leaf, or an empty hook.
RemovableHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);

}  // namespace tapegrad::autograd
