// Tape nodes and how ops record them.
#include "tapegrad/autograd/node.h"

#include <atomic>

#include "autograd/anomaly_check.h"
#include "autograd/requires_grad_probe.h"
#include "tapegrad/autograd/anomaly_mode.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/hooks.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad::autograd {

namespace {

std::atomic<uint64_t> g_next_sequence_nr{0};

// The node an op records: a closure from output gradients to input gradients.
class FunctionNode : public Node {
 public:
  FunctionNode(const char* name, BackwardFn backward, std::vector<OutputMeta> input_meta)
      : Node(name), backward_(std::move(backward)), input_meta_(std::move(input_meta)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    TG_CHECK(!released_, "backward: trying to backward through the graph a second time (node ", name(),
             "), after its saved tensors were freed; pass retain_graph=true to the first backward() "
             "to keep them");
    std::vector<Tensor> grads = backward_(grad_outputs);
    TG_ASSERT(grads.size() == next_edges_.size(), "backward of ", name(), " returned ", grads.size(), " gradients for ",
              next_edges_.size(), " inputs");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() || !next_edges_[i].valid()) continue;
      TG_ASSERT(grads[i].sizes() == input_meta_[i].sizes, "backward of ", name(), " gave input ", i,
                " a gradient of shape ", shape_str(grads[i].sizes()), ", expected ", shape_str(input_meta_[i].sizes));
      if (grads[i].dtype() != input_meta_[i].dtype) grads[i] = grads[i].to(input_meta_[i].dtype);
    }
    return grads;
  }

  void release() override {
    backward_ = nullptr;
    released_ = true;
  }

 private:
  BackwardFn backward_;
  std::vector<OutputMeta> input_meta_;
  bool released_ = false;
};

std::vector<OutputMeta> input_meta_of(const Node&, const std::vector<Tensor>& inputs) {
  std::vector<OutputMeta> metas;
  for (const Tensor& input : inputs)
    metas.push_back(input.defined() ? OutputMeta{input.sizes(), input.dtype(), input.device()}
                                    : OutputMeta{{}, kFloat32, kCPU});
  return metas;
}

}  // namespace

Node::Node(std::string name) : name_(std::move(name)), sequence_nr_(g_next_sequence_nr++) {}

Node::~Node() {
  // The outermost destructor on this thread owns a worklist; nodes whose last owner is this node
  // are moved onto it instead of being destroyed inside this frame, so depth stays constant.
  thread_local std::vector<std::shared_ptr<Node>>* worklist = nullptr;
  std::vector<std::shared_ptr<Node>> local;
  const bool outermost = worklist == nullptr;
  if (outermost) worklist = &local;
  for (Edge& edge : next_edges_)
    if (edge.node && edge.node.use_count() == 1) worklist->push_back(std::move(edge.node));
  next_edges_.clear();
  if (!outermost) return;
  while (!local.empty()) {
    std::shared_ptr<Node> next = std::move(local.back());
    local.pop_back();
    next.reset();  // may push that node's own edges onto `local`
  }
  worklist = nullptr;
}

void Node::retain_output_grad(int output_nr, const std::shared_ptr<TensorImpl>& tensor) {
  retained_.emplace_back(output_nr, tensor);
}

void Node::drop_retained(const TensorImpl* tensor) {
  for (auto it = retained_.begin(); it != retained_.end();) {
    auto held = it->second.lock();
    it = (!held || held.get() == tensor) ? retained_.erase(it) : it + 1;
  }
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {
  outputs_.push_back(OutputMeta{leaf_->sizes, leaf_->dtype, leaf_->storage->device()});
}

namespace {

// Whether the first gradient of a leaf can become its .grad as it is: nothing else holds the
// tensor (the engine drops its own reference after this node runs) or its memory, it has no
// history, and it is a plain contiguous tensor of the leaf's shape (not a broadcast, a view of a
// larger buffer, or a wrapper of memory owned elsewhere). As PyTorch does, this saves a copy of
// every parameter's gradient per backward.
bool can_take(const Tensor& incoming, const TensorImpl& leaf) {
  const std::shared_ptr<TensorImpl>& impl = incoming.impl_ptr();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->is_view && !impl->requires_grad &&
         impl->grad_fn == nullptr && impl->offset == 0 && impl->sizes == leaf.sizes && impl->dtype == leaf.dtype &&
         incoming.is_contiguous() &&
         impl->storage->nbytes() == static_cast<size_t>(incoming.numel()) * dtype_size(impl->dtype);
}

}  // namespace

std::vector<Tensor> AccumulateGrad::apply(const std::vector<Tensor>& grad_outputs) {
  const Tensor& given = grad_outputs[0];  // a reference: can_take counts the owners
  if (!given.defined()) return {};
  // The graph may have been recorded before set_data gave the leaf a new geometry (Module::to):
  // a gradient of another dtype or device is converted, one of another shape means nothing here.
  TG_CHECK(given.sizes() == leaf_->sizes, "backward: the gradient for a leaf of shape ", shape_str(leaf_->sizes),
           " has shape ", shape_str(given.sizes()),
           "; the leaf was given data of another shape (set_data, Module::to) after the forward pass");
  Tensor converted;
  if (given.dtype() != leaf_->dtype || given.device() != leaf_->storage->device())
    converted = given.to(leaf_->storage->device(), leaf_->dtype);
  const Tensor& incoming = converted.defined() ? converted : given;
  std::vector<std::pair<uint64_t, std::shared_ptr<PostAccumulateGradHook>>> hooks;
  {
    // Note [shared leaves]: other threads may be accumulating into this leaf or reading its grad.
    std::lock_guard<std::mutex> lock(leaf_->autograd_mutex);
    if (!leaf_->grad) {
      // Otherwise a fresh buffer: the incoming tensor may be shared with other edges of the graph.
      leaf_->grad = can_take(incoming, *leaf_) ? incoming.impl_ptr() : incoming.clone().impl_ptr();
    } else {
      Tensor(leaf_->grad).add_(incoming);
    }
    if (leaf_->post_accumulate_grad_hooks) hooks = leaf_->post_accumulate_grad_hooks->hooks;
  }
  // Outside the lock: a hook reads and may set the leaf's grad, or (un)register hooks.
  for (const auto& entry : hooks) (*entry.second)(Tensor(leaf_));
  return {};
}

SavedTensor::SavedTensor(const Tensor& tensor) {
  if (!tensor.defined()) return;
  tensor_ = tensor.detach();
  version_ = tensor.storage()->version();
}

Tensor SavedTensor::get() const {
  if (tensor_.defined()) {
    TG_CHECK(tensor_.storage()->version() == version_, "backward: a tensor of shape ", shape_str(tensor_.sizes()),
             " needed for gradient computation was modified by an in-place operation after it was "
             "saved; use an out-of-place op (or clone()) instead");
  }
  return tensor_;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) {
    RequiresGradProbe::note(inputs);  // Note [checkpoint probe]
    return false;
  }
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.requires_grad()) return Edge{};
  TensorImpl* impl = tensor.impl();
  if (impl->grad_fn) return Edge{impl->grad_fn, impl->output_nr};
  // Note [shared leaves]: two threads recording ops on one parameter share its accumulator.
  std::lock_guard<std::mutex> lock(impl->autograd_mutex);
  std::shared_ptr<Node> accumulator = impl->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor.impl_ptr());
    impl->grad_accumulator = accumulator;
  }
  return Edge{accumulator, 0};
}

void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward, bool materialize_grads) {
  for (const Tensor& input : inputs)
    TG_CHECK(!input.defined() || !input.is_inference(), name, ": an inference tensor ", shape_str(input.sizes()),
             " (made under InferenceMode) cannot be used in an op that records gradients; clone() it outside "
             "InferenceMode to get a normal tensor");
  std::vector<OutputMeta> input_meta;
  std::vector<Edge> edges;
  for (const Tensor& input : inputs) {
    edges.push_back(gradient_edge(input));
    input_meta.push_back(input.defined() ? OutputMeta{input.sizes(), input.dtype(), input.device()}
                                         : OutputMeta{{}, kFloat32, kCPU});
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(input_meta));
  node->next_edges_ = std::move(edges);
  node->materialize_grads_ = materialize_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* out = outputs[i].impl();
    node->outputs_.push_back(OutputMeta{out->sizes, out->dtype, outputs[i].device()});
    // An in-place op re-records a tensor: a retained grad follows it to its new node.
    bool retained = out->retains_grad && out->grad_fn != nullptr;
    if (retained) out->grad_fn->drop_retained(out);
    out->grad_fn = node;
    out->output_nr = static_cast<int>(i);
    out->requires_grad = true;
    out->retains_grad = retained;
    if (retained) node->retain_output_grad(static_cast<int>(i), outputs[i].impl_ptr());
    if (!node->forward_stream_ && outputs[i].device().is_cuda())
      node->forward_stream_ = cuda::current_stream(outputs[i].device().index());
  }
  if (anomaly_mode_enabled()) {
    std::string path = current_module_path();
    node->anomaly_context_ = "in " + (path.empty() ? std::string("the model's top level") : path) + " with inputs " +
                             shapes_str(input_meta_of(*node, inputs)) + " and outputs " + shapes_str(node->outputs_);
    for (size_t i = 0; i < outputs.size(); ++i)
      TG_CHECK(all_finite(outputs[i]), "anomaly: forward of ", name, " produced NaN or Inf in output ", i, " (",
               node->anomaly_context_, ")");
  }
}

}  // namespace tapegrad::autograd
