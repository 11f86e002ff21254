// cuda::Graph: stream capture of a whole step into a private pool of the caching allocator
// (Note [graph pools] in caching_allocator.cpp), instantiation, and replay.
//
// Note [capture failures]: CUDA reports a call that cannot be captured (a host synchronisation, a
// pageable copy) where it happens, and then again, without saying which call, when the capture
// ends. throw_cuda_error (cuda_check.h) remembers the first such failure of the thread's capture,
// with the tapegrad function that made the call, so capture_end can name it even when the caller
// caught the first error or ignored a status.
#include "tapegrad/cuda/graph.h"

#include <atomic>
#include <exception>
#include <optional>
#include <string>

#include "runtime/caching_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/runtime.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad::cuda_backend {

namespace {
thread_local int tls_captures = 0;  // captures this thread runs
thread_local std::string tls_capture_failure;
}  // namespace

void note_capture_failure(const char* where, const char* call, cudaError_t status) {
  if (tls_captures == 0 || !tls_capture_failure.empty()) return;
  tls_capture_failure = detail::str_cat(where, " (", call, ": ", cudaGetErrorName(status), ")");
}

// Called once per graph replay: the per-step counters see a replay as one launch (the kernels it
// runs were counted when they were captured).
void note_graph_launch() {
  cuda::note_launch();
}

}  // namespace tapegrad::cuda_backend

namespace tapegrad::cuda {

namespace detail {

struct GraphState {
  int device = -1;
  MempoolId pool = 0;
  bool capturing = false;
  cudaStream_t stream = nullptr;  // the capturing stream
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::optional<Stream> side;
  std::optional<StreamGuard> guard;  // the side stream made current, while capturing
};

}  // namespace detail

namespace {

cudaStreamCaptureMode cuda_mode(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::Global:
      return cudaStreamCaptureModeGlobal;
    case CaptureMode::ThreadLocal:
      return cudaStreamCaptureModeThreadLocal;
    case CaptureMode::Relaxed:
      return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeGlobal;
}

}  // namespace

MempoolId graph_pool_handle() {
  static std::atomic<MempoolId> next{0};
  return ++next;
}

Graph::Graph() : state_(std::make_unique<detail::GraphState>()) {}

Graph::~Graph() {
  try {
    reset();
  } catch (...) {
    // A destructor cannot report: the pool's memory stays cached, which is safe.
  }
}

void Graph::capture_begin(MempoolId pool, CaptureMode mode) {
  detail::GraphState& s = *state_;
  TG_CHECK(!s.capturing, "cuda::Graph::capture_begin: this graph is capturing already");
  TG_CHECK(s.exec == nullptr, "cuda::Graph::capture_begin: this graph holds a capture already; call reset() first");
  TG_CHECK(cuda_backend::CachingAllocator::enabled(),
           "cuda::Graph::capture_begin: graphs need the caching allocator (TAPEGRAD_CUDA_CACHING_ALLOCATOR=0 is set): "
           "memory allocated during capture must stay reserved for the graph");
  const int device = cuda_backend::current_device_index();
  // As torch.cuda.graph does: the warm-up's work is finished, and its blocks are free, before capture.
  synchronize(device);
  if (current_stream(device).is_default()) {
    if (!s.side || s.side->device() != device) s.side.emplace(device);
    s.guard.emplace(*s.side);
  }
  s.device = device;
  s.stream = cuda_backend::current_stream(device);
  s.pool = pool != 0 ? pool : graph_pool_handle();
  auto& allocator = cuda_backend::caching_allocator();
  allocator.begin_allocate_to_pool(device, s.pool, s.stream);
  cudaError_t status = cudaStreamBeginCapture(s.stream, cuda_mode(mode));
  if (status != cudaSuccess) {
    allocator.end_allocate_to_pool(device, s.pool);
    allocator.release_pool(device, s.pool);
    s.pool = 0;
    s.guard.reset();
    cuda_backend::throw_cuda_error(status, "cudaStreamBeginCapture", "cuda::Graph::capture_begin");
  }
  s.capturing = true;
  ++cuda_backend::tls_captures;
  cuda_backend::tls_capture_failure.clear();
}

void Graph::capture_end() {
  detail::GraphState& s = *state_;
  TG_CHECK(s.capturing, "cuda::Graph::capture_end: this graph is not capturing (call capture_begin() first)");
  DeviceGuard device_guard(s.device);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(s.stream, &graph);
  const std::string cuda_says =
      status == cudaSuccess ? ""
                            : tapegrad::detail::str_cat(cudaGetErrorName(status), ": ", cudaGetErrorString(status));
  (void)cudaGetLastError();
  const std::string failure = cuda_backend::tls_capture_failure;
  s.capturing = false;
  --cuda_backend::tls_captures;
  cuda_backend::tls_capture_failure.clear();
  auto& allocator = cuda_backend::caching_allocator();
  allocator.end_allocate_to_pool(s.device, s.pool);
  s.guard.reset();
  if (status != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    allocator.release_pool(s.device, s.pool);
    s.pool = 0;
    TG_CHECK(false, "cuda::Graph::capture_end: the capture failed",
             failure.empty() ? std::string() : tapegrad::detail::str_cat(": ", failure, " could not be captured"),
             " (CUDA: ", cuda_says,
             "). Nothing in a captured region may wait for the GPU (item(), copies to the host or from pageable "
             "memory, synchronize()); see docs/cuda_graphs.md");
  }
  s.graph = graph;
  const cudaError_t made = cudaGraphInstantiateWithFlags(&s.exec, graph, 0);
  if (made != cudaSuccess) {
    s.exec = nullptr;
    reset();
    cuda_backend::throw_cuda_error(made, "cudaGraphInstantiateWithFlags", "cuda::Graph::capture_end");
  }
}

void Graph::abort_capture() noexcept {
  detail::GraphState& s = *state_;
  if (!s.capturing) return;
  cuda_backend::NoThrowDeviceGuard device_guard(s.device);
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(s.stream, &graph) != cudaSuccess) (void)cudaGetLastError();
  if (graph != nullptr && cudaGraphDestroy(graph) != cudaSuccess) (void)cudaGetLastError();
  s.capturing = false;
  --cuda_backend::tls_captures;
  cuda_backend::tls_capture_failure.clear();
  try {
    auto& allocator = cuda_backend::caching_allocator();
    allocator.end_allocate_to_pool(s.device, s.pool);
    allocator.release_pool(s.device, s.pool);
  } catch (...) {
    // Releasing is best effort here: the pool's memory stays cached.
  }
  s.pool = 0;
  s.guard.reset();
}

void Graph::replay() {
  detail::GraphState& s = *state_;
  TG_CHECK(!s.capturing, "cuda::Graph::replay: the graph is still capturing (call capture_end() first)");
  TG_CHECK(s.exec != nullptr, "cuda::Graph::replay: nothing captured (call capture_begin() and capture_end() first)");
  DeviceGuard device_guard(s.device);
  TG_CUDA_CHECK(cudaGraphLaunch(s.exec, cuda_backend::current_stream(s.device)), "cuda::Graph::replay");
  cuda_backend::note_graph_launch();
}

void Graph::reset() {
  detail::GraphState& s = *state_;
  abort_capture();
  if (s.exec == nullptr && s.graph == nullptr && s.pool == 0) return;
  DeviceGuard device_guard(s.device);
  if (s.exec != nullptr) TG_CUDA_CHECK(cudaGraphExecDestroy(s.exec), "cuda::Graph::reset");
  s.exec = nullptr;
  if (s.graph != nullptr) TG_CUDA_CHECK(cudaGraphDestroy(s.graph), "cuda::Graph::reset");
  s.graph = nullptr;
  const MempoolId pool = s.pool;
  s.pool = 0;
  if (pool != 0) cuda_backend::caching_allocator().release_pool(s.device, pool);
}

bool Graph::is_capturing() const {
  return state_->capturing;
}
bool Graph::has_graph() const {
  return state_->exec != nullptr;
}
MempoolId Graph::pool() const {
  return state_->pool;
}

Stream Graph::capture_stream() const {
  detail::GraphState& s = *state_;
  if (!s.side) s.side.emplace(-1);
  return *s.side;
}

GraphCapture::GraphCapture(Graph& graph, MempoolId pool, CaptureMode mode)
    : graph_(graph), uncaught_(std::uncaught_exceptions()) {
  graph_.capture_begin(pool, mode);
}

GraphCapture::~GraphCapture() noexcept(false) {
  if (std::uncaught_exceptions() > uncaught_) {
    graph_.abort_capture();
    return;
  }
  graph_.capture_end();
}

bool is_current_stream_capturing() {
  if (!is_available()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(cuda_backend::current_stream(cuda_backend::current_device_index()), &status) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace tapegrad::cuda
