// cuda::Graph in a build without the CUDA backend: a Graph can be made and reset, capture and
// replay throw a clear Error, and nothing is ever capturing.
#include "tapegrad/core/error.h"
#include "tapegrad/cuda/graph.h"

namespace tapegrad::cuda {

namespace detail {
struct GraphState {};
}  // namespace detail

namespace {
[[noreturn]] void no_cuda(const char* what) {
  tapegrad::detail::throw_error(tapegrad::detail::str_cat(
      what, ": this build of tapegrad has no CUDA backend (configured with TAPEGRAD_CUDA=OFF or without a CUDA ",
      "toolkit), so there is nothing to capture"));
}
}  // namespace

MempoolId graph_pool_handle() {
  no_cuda("cuda::graph_pool_handle");
}

Graph::Graph() : state_(std::make_unique<detail::GraphState>()) {}
Graph::~Graph() = default;
void Graph::capture_begin(MempoolId, CaptureMode) {
  no_cuda("cuda::Graph::capture_begin");
}
void Graph::capture_end() {
  no_cuda("cuda::Graph::capture_end");
}
void Graph::replay() {
  no_cuda("cuda::Graph::replay");
}
void Graph::reset() {}
void Graph::abort_capture() noexcept {}
bool Graph::is_capturing() const {
  return false;
}
bool Graph::has_graph() const {
  return false;
}
MempoolId Graph::pool() const {
  return 0;
}
Stream Graph::capture_stream() const {
  no_cuda("cuda::Graph::capture_stream");
}

GraphCapture::GraphCapture(Graph& graph, MempoolId pool, CaptureMode mode) : graph_(graph) {
  (void)uncaught_;  // used by the CUDA build
  graph_.capture_begin(pool, mode);
}
GraphCapture::~GraphCapture() noexcept(false) {}

bool is_current_stream_capturing() {
  return false;
}

}  // namespace tapegrad::cuda
