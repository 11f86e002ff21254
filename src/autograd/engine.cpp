// The backward engine: a topological replay of the tape, latest node first.
//
// Note [backward streams]: as in PyTorch, each node's backward runs on the CUDA stream its forward
// ran on, so the kernels that read its saved tensors are ordered after the kernels that made them
// (and the caching allocator's per-stream reuse stays safe). A gradient made on another stream is
// waited for (an event) before it is used; a node without a stream of its own (AccumulateGrad)
// runs on the stream of the gradient it receives; and before backward() returns, the caller's
// current stream on each device waits for every stream backward used, so work queued after it sees
// the gradients.
#include "tapegrad/autograd/engine.h"

#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_map>

#include "autograd/anomaly_check.h"
#include "profiler/record.h"
#include "tapegrad/autograd/anomaly_mode.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/node.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"

namespace tapegrad::autograd {

namespace {

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Everything the replay keeps per node of the reachable graph, in one table entry: the owner that
// keeps the node alive until it has run, the gradients arriving at its outputs (one slot per output,
// several arrivals at a slot summed) and how many edges still point at it.
struct NodeTask {
  std::shared_ptr<Node> node;
  std::vector<Tensor> grads;
  int dependencies = 0;
  std::optional<cuda::Stream> producer;  // where the gradients so far were made (CUDA only)
};

// `waiter` will not run ahead of the work queued on `producer` so far.
void order_after(const cuda::Stream& waiter, const cuda::Stream& producer) {
  if (waiter == producer) return;
  cuda::Event done;
  done.record(producer);
  waiter.wait(done);
}

// Taken by value and moved in, so a gradient the producing node no longer holds stays singly owned.
// `made_on` is the stream that made `grad` (none for CPU gradients); a sum of two gradients runs
// there, after the earlier one's stream.
void accumulate_into(NodeTask& task, size_t count, int index, Tensor grad, const std::optional<cuda::Stream>& made_on) {
  std::vector<Tensor>& slots = task.grads;
  if (slots.size() < count) slots.resize(count);
  Tensor& slot = slots[static_cast<size_t>(index)];
  if (slot.defined() && made_on && task.producer) order_after(*made_on, *task.producer);
  slot = slot.defined() ? add(slot, grad) : std::move(grad);
  if (made_on) task.producer = made_on;
}

// The current stream of the device of a CUDA tensor, none for a CPU one.
std::optional<cuda::Stream> stream_of(const Tensor& t) {
  if (!t.defined() || !t.device().is_cuda()) return std::nullopt;
  return cuda::current_stream(t.device().index());
}

// The gradient of an output that nothing used: a single zero broadcast to the output's shape
// (stride 0), so no buffer of that size is filled; ops read gradients through their strides.
Tensor broadcast_zero(const OutputMeta& meta) {
  return zeros({}, TensorOptions(meta.dtype).device(meta.device)).expand(meta.sizes);
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  TG_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got ", roots.size(), " tensors but ",
           grad_roots.size(), " gradients");
  NoGradGuard no_grad;

  std::unordered_map<Node*, NodeTask> tasks;
  tasks.reserve(64);
  std::vector<Node*> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TG_CHECK(root.defined(), "backward: tensor ", i, " is undefined");
    TG_CHECK(root.requires_grad(), "backward: tensor ", i,
             " does not require grad and has no grad_fn (did you forget requires_grad_() on a leaf, "
             "or run the forward pass under NoGradGuard?)");
    Tensor grad = grad_roots.empty() ? Tensor() : grad_roots[i];
    if (!grad.defined()) {
      TG_CHECK(root.numel() == 1,
               "backward: a gradient can be created implicitly only for a one-element "
               "output, got shape ",
               shape_str(root.sizes()), "; pass the gradient explicitly");
      grad = ones_like(root);
    }
    TG_CHECK(grad.sizes() == root.sizes(), "backward: gradient of shape ", shape_str(grad.sizes()),
             " does not match the tensor's shape ", shape_str(root.sizes()));
    TG_CHECK(grad.device() == root.device(), "backward: gradient on ", grad.device(), " for a tensor on ",
             root.device());
    if (grad.dtype() != root.dtype()) grad = grad.to(root.dtype());
    Edge edge = gradient_edge(root);
    Node* node = edge.node.get();
    NodeTask& task = tasks[node];
    task.node = edge.node;
    accumulate_into(task, node->outputs().size(), edge.input_nr, grad, stream_of(grad));
    // A root given twice contributes both gradients but is one node of the graph.
    if (std::find(root_nodes.begin(), root_nodes.end(), node) == root_nodes.end()) root_nodes.push_back(node);
  }

  // How many edges point at each node, counting only the part of the graph the roots reach (a node
  // has a table entry holding its owner once it has been seen).
  std::vector<Node*> stack(root_nodes.begin(), root_nodes.end());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      NodeTask& next = tasks[edge.node.get()];
      next.dependencies += 1;
      if (!next.node) {
        next.node = edge.node;
        stack.push_back(edge.node.get());
      }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (Node* n : root_nodes)
    if (tasks[n].dependencies == 0) ready.push(n);

  std::vector<cuda::Stream> used_streams;
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    auto entry = tasks.find(node);
    // Keeps the node alive while it runs; its table entry goes now, so the table only holds
    // nodes still waiting.
    std::shared_ptr<Node> owner = std::move(entry->second.node);
    std::vector<Tensor> grads = std::move(entry->second.grads);
    const std::optional<cuda::Stream> producer = std::move(entry->second.producer);
    tasks.erase(entry);
    // Note [backward streams].
    std::optional<cuda::Stream> stream = node->forward_stream() ? node->forward_stream() : producer;
    std::optional<cuda::StreamGuard> on_stream;
    if (stream) {
      if (producer) order_after(*stream, *producer);
      on_stream.emplace(*stream);
      if (std::find(used_streams.begin(), used_streams.end(), *stream) == used_streams.end())
        used_streams.push_back(*stream);
    }
    grads.resize(node->outputs().size());
    // An output that received no gradient: a zero, unless the node reads an undefined one as zero.
    if (node->materialize_grads()) {
      for (size_t i = 0; i < grads.size(); ++i)
        if (!grads[i].defined()) grads[i] = broadcast_zero(node->outputs()[i]);
    }
    for (const auto& [output_nr, weak] : node->retained()) {
      if (auto impl = weak.lock()) {
        const size_t i = static_cast<size_t>(output_nr);
        const Tensor g = grads[i].defined() ? grads[i] : broadcast_zero(node->outputs()[i]);
        impl->grad = impl->grad ? add(Tensor(impl->grad), g).impl_ptr() : g.clone().impl_ptr();
      }
    }
    std::vector<Tensor> input_grads;
    {
      // The profiler's event for this node: the kernels it runs nest inside, and its sequence
      // number and name tie it to the forward op that recorded it.
      std::optional<profiler::detail::EventScope> profiled;
      if (profiler::detail::active()) {
        profiled.emplace(profiler::detail::backward_event_name(node->name()), profiler::EventKind::Autograd);
        if (profiler::ProfilerEvent* e = profiled->data()) {
          e->sequence_nr = static_cast<int64_t>(node->sequence_nr());
          e->forward_op = node->name();
        }
      }
      input_grads = node->apply(grads);
    }
    grads.clear();  // the output gradients' memory can be reused by the nodes that follow
    if (anomaly_mode_enabled()) {
      for (size_t i = 0; i < input_grads.size(); ++i)
        TG_CHECK(all_finite(input_grads[i]), "anomaly: backward of ", node->name(),
                 " produced NaN or Inf in the gradient for input ", i, " (shape ", shape_str(input_grads[i].sizes()),
                 "); its forward ran ", node->anomaly_context());
    }
    if (!retain_graph) node->release();
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].valid()) continue;
      Node* next = edges[i].node.get();
      NodeTask& task = tasks[next];
      if (i < input_grads.size() && input_grads[i].defined()) {
        std::optional<cuda::Stream> made_on;
        if (input_grads[i].device().is_cuda())
          made_on = stream && stream->device() == input_grads[i].device().index() ? stream : stream_of(input_grads[i]);
        accumulate_into(task, next->outputs().size(), edges[i].input_nr, std::move(input_grads[i]), made_on);
      }
      if (--task.dependencies == 0) ready.push(next);
    }
  }
  for (const cuda::Stream& used : used_streams) order_after(cuda::current_stream(used.device()), used);
}

}  // namespace tapegrad::autograd

namespace tapegrad {
void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}
}  // namespace tapegrad
