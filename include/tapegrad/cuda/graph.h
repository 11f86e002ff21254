// CUDA graphs: capture the kernels of a whole training step once, replay them with one launch, as
// PyTorch's torch.cuda.CUDAGraph. See docs/cuda_graphs.md.
//
//   // Warm up first (a few eager steps on the same shapes): lazily created state such as
//   // gradients, optimiser moments and cuBLAS workspaces must exist before capture.
//   for (int i = 0; i < 3; ++i) train_step();
//   cuda::Graph graph;
//   {
//     cuda::GraphCapture capture(graph);   // capture_begin() ... capture_end()
//     train_step();                        // recorded, not run: nothing is computed yet
//   }
//   for (auto& batch : loader) {
//     static_x.copy_(batch.x);             // new data into the tensors the graph reads
//     graph.replay();                      // the whole step, one launch
//   }
//
// Rules (a broken one is a tapegrad::Error naming what broke it):
//  - Shapes, dtypes and the tensors a captured step reads and writes are fixed: replay reads and
//    writes the addresses captured. Feed new data by copying into the captured input tensors, and
//    keep every tensor the step reads alive as long as the graph.
//  - Nothing in the captured region may wait for the GPU: item(), copies to the host, copies from
//    pageable host memory, cuda::synchronize(), Stream::synchronize(), Event::synchronize().
//  - Host-side values are baked in at capture: a learning rate changed later by a scheduler does
//    not reach the replayed optimiser step. Adam needs AdamOptions::capturable(true) (its step count
//    lives on the device); SGD needs its momentum buffers made by a warm-up step.
//  - Capture runs on a non-default stream: when the current stream is the default one, the graph's
//    own side stream is made current until capture_end(). Replay runs on the current stream.
//  - Memory allocated during capture comes from the graph's private pool of the caching allocator
//    and goes back to it; the pool keeps it until reset() or destruction, so the addresses the graph
//    uses stay valid. Two graphs may share a pool (capture_begin(other.pool())) when they are
//    replayed in the order they were captured.
#pragma once

#include <cstdint>
#include <memory>

#include "tapegrad/cuda/stream.h"

namespace tapegrad::cuda {

// A private memory pool of the caching allocator (PyTorch's MempoolId_t); 0 means "a new one".
using MempoolId = uint64_t;

// A fresh pool id for capture_begin, so that several graphs can share one pool.
MempoolId graph_pool_handle();

// How strictly CUDA refuses calls that are unsafe during capture (cudaStreamCaptureMode): Global
// (the default, as PyTorch's) also refuses them on other threads while this capture runs.
enum class CaptureMode { Global, ThreadLocal, Relaxed };

namespace detail {
struct GraphState;
}

class Graph {
 public:
  // Holds nothing until capture_begin; needs no device until then.
  Graph();
  ~Graph();  // reset()
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing the calling thread's work on the current device. Throws when this graph is
  // capturing or holds a capture already (reset() first), or without a CUDA device.
  void capture_begin(MempoolId pool = 0, CaptureMode mode = CaptureMode::Global);
  // Ends the capture and instantiates the graph. Throws, holding nothing, when the capture was
  // invalidated (the message names the call that did it: a host synchronisation, a pageable copy).
  void capture_end();
  // Launches the captured work on the current stream of the graph's device. Throws when nothing
  // is captured.
  void replay();
  // Frees the graph and hands its pool back (its memory is released once the tensors allocated in
  // it are gone). The graph can then capture again.
  void reset();

  bool is_capturing() const;
  bool has_graph() const;  // captured and not reset
  // The graph's private pool (0 before capture_begin).
  MempoolId pool() const;
  // The side stream capture runs on when the current stream is the default one.
  Stream capture_stream() const;

 private:
  friend class GraphCapture;
  void abort_capture() noexcept;  // ends a capture that failed, keeping nothing

  std::unique_ptr<detail::GraphState> state_;
};

// capture_begin on construction, capture_end on destruction (PyTorch's `with torch.cuda.graph(g)`).
// When an exception leaves the scope the capture is abandoned instead: the graph holds nothing and
// the original exception propagates.
class GraphCapture {
 public:
  explicit GraphCapture(Graph& graph, MempoolId pool = 0, CaptureMode mode = CaptureMode::Global);
  ~GraphCapture() noexcept(false);
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

 private:
  Graph& graph_;
  int uncaught_ = 0;
};

// True while the calling thread's current stream (of the current device) is being captured; always
// false without a device. Code that cannot be captured checks this to throw a clear error.
bool is_current_stream_capturing();

}  // namespace tapegrad::cuda
