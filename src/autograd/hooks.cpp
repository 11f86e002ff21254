// Post-accumulate-grad hooks: registration and removal (AccumulateGrad in node.cpp runs them).
#include "tapegrad/autograd/hooks.h"

#include <algorithm>

#include "tapegrad/autograd/node.h"

namespace tapegrad::autograd {

RemovableHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  TG_CHECK(leaf.defined(), "register_post_accumulate_grad_hook: the tensor is undefined");
  TG_CHECK(leaf.requires_grad(),
           "register_post_accumulate_grad_hook: cannot register a hook on a tensor that does not require grad");
  TG_CHECK(leaf.is_leaf(), "register_post_accumulate_grad_hook: post accumulate grad hooks cannot be registered on ",
           "non-leaf tensors (this one was made by ", leaf.grad_fn()->name(), ")");
  TG_CHECK(hook != nullptr, "register_post_accumulate_grad_hook: the hook is empty");
  TensorImpl* impl = leaf.impl();
  std::lock_guard<std::mutex> lock(impl->autograd_mutex);  // Note [shared leaves]
  if (!impl->post_accumulate_grad_hooks) impl->post_accumulate_grad_hooks = std::make_shared<PostAccumulateGradHooks>();
  PostAccumulateGradHooks& list = *impl->post_accumulate_grad_hooks;
  uint64_t id = list.next_id++;
  list.hooks.emplace_back(id, std::make_shared<PostAccumulateGradHook>(std::move(hook)));
  return RemovableHandle(leaf.impl_ptr(), id);
}

void RemovableHandle::remove() {
  std::shared_ptr<TensorImpl> impl = tensor_.lock();
  tensor_.reset();
  if (!impl) return;
  std::lock_guard<std::mutex> lock(impl->autograd_mutex);
  if (!impl->post_accumulate_grad_hooks) return;
  auto& hooks = impl->post_accumulate_grad_hooks->hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto& entry) { return entry.first == id_; }),
              hooks.end());
}

}  // namespace tapegrad::autograd
