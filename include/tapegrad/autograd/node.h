// The tape's node type. It knows nothing about individual ops: an op records a Node holding a
// closure that maps output gradients to input gradients, and the edges to its inputs' nodes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/cuda/stream.h"

namespace tapegrad::autograd {

class Node;

// Where a gradient flows: input number `input_nr` of `node`. A null node means "no gradient needed".
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// Shape, dtype and device of an output, so the engine can make zeros for an unused output.
struct OutputMeta {
  Shape sizes;
  DType dtype;
  Device device;
};

class Node {
 public:
  explicit Node(std::string name);
  // Iterative: a long chain, where each node's edges own the next node, is freed without recursion.
  virtual ~Node();

  const std::string& name() const { return name_; }
  // Larger means created later; the engine runs later nodes first.
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<OutputMeta>& outputs() const { return outputs_; }

  // Gradients for each input (one per next edge) from gradients for each output.
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees what apply() needs (saved tensors); called after backward without retain_graph.
  virtual void release() {}

  // Non-leaf tensors whose .grad() should be filled with this node's output gradients.
  void retain_output_grad(int output_nr, const std::shared_ptr<TensorImpl>& tensor);
  // Stops filling `tensor`'s grad (an in-place op moved the tensor to a newer node).
  void drop_retained(const TensorImpl* tensor);
  const std::vector<std::pair<int, std::weak_ptr<TensorImpl>>>& retained() const { return retained_; }

  // The CUDA stream the forward ran on (the current stream of the first CUDA output's device when the
  // node was recorded); backward runs the node there (Note [backward streams] in engine.cpp). Empty
  // for nodes without CUDA outputs.
  const std::optional<cuda::Stream>& forward_stream() const { return forward_stream_; }

  // Anomaly mode only: where the forward pass ran and with which shapes, for error messages.
  const std::string& anomaly_context() const { return anomaly_context_; }

  // False when apply() takes an undefined tensor for an output that received no gradient and
  // reads it as zeros (PyTorch's materialize_grads=False); true (the default): the engine passes
  // a zero of the output's shape.
  bool materialize_grads() const { return materialize_grads_; }

 protected:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;

 private:
  friend void record(const char*, const std::vector<Tensor>&, const std::vector<Tensor>&,
                     std::function<std::vector<Tensor>(const std::vector<Tensor>&)>, bool);
  std::string name_;
  uint64_t sequence_nr_;
  std::vector<std::pair<int, std::weak_ptr<TensorImpl>>> retained_;
  std::optional<cuda::Stream> forward_stream_;
  std::string anomaly_context_;
  bool materialize_grads_ = true;
};

// A leaf's sink: adds the incoming gradient into the leaf's .grad().
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// A tensor kept for backward. It holds a detached alias (no reference cycle through the output's
// grad_fn) and the storage version at save time, so an in-place write in between is an error.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& tensor);  // NOLINT: implicit, so closures can save tensors directly
  Tensor get() const;                 // throws if the tensor was modified in place since saving
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

// True when grad mode is on and any of `inputs` requires grad: the op must record itself.
bool any_requires_grad(const std::vector<Tensor>& inputs);
// Records one tape node for an op: `outputs` become non-leaf tensors that require grad, with
// grad_fn pointing at a node whose closure `backward` returns one gradient per input (an
// undefined tensor where an input needs none). Call only when any_requires_grad(inputs).
// materialize_grads = false: `backward` gets an undefined tensor, to be read as zeros, for an output
// that received no gradient, instead of a zero the engine makes (on CUDA, a fill launch each).
void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn backward, bool materialize_grads = true);
// The edge a gradient for `tensor` should follow (its grad_fn, its accumulator, or none).
Edge gradient_edge(const Tensor& tensor);

}  // namespace tapegrad::autograd
