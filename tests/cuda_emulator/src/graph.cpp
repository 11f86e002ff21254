// Stream capture and CUDA graphs, with CUDA's rules: work queued on a capturing stream is recorded
// as a node (a kernel with the argument copies made at its launch, a copy, a memset), not run; a
// launched graph queues all its nodes, in an order that respects every captured dependency, as one
// item on the launch stream.
//
// Note [capture rules]: what CUDA refuses during capture, refused here with CUDA's error codes:
//  - capture on the legacy default stream (cudaErrorStreamCaptureUnsupported);
//  - waiting for a capturing stream (cudaStreamSynchronize/Query: Unsupported; cudaEventSynchronize/
//    Query of an event recorded in the capture: CapturedEvent; cudaDeviceSynchronize while a stream
//    of the device captures: Unsupported), and copies between the device and pageable host memory
//    on a capturing stream (Unsupported): each invalidates the capture, whose cudaStreamEndCapture
//    then returns cudaErrorStreamCaptureInvalidated;
//  - potentially unsafe calls (cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost, synchronous
//    cudaMemcpy/cudaMemset) where the thread's capture interaction mode prohibits them: Global, a
//    capture of this thread or a Global capture of any thread; ThreadLocal, a capture of this thread
//    not begun Relaxed; Relaxed, never (cudaThreadExchangeStreamCaptureMode);
//  - the legacy stream used while a blocking stream of its device captures (Implicit);
//  - a capturing stream waiting for an event recorded outside the capture (Isolation), two captures
//    merged by a wait (Merge);
//  - ending on another stream than the one that began (Unmatched), from another thread unless the
//    capture is Relaxed (WrongThread), or with a stream that joined the capture and was not joined
//    back into the origin stream (Unjoined).
// Streams join a capture by waiting for an event recorded in it. Joins are tracked with vector
// clocks: each stream of the capture knows how many nodes of every other stream it depends on.
//
// At replay each node's pointer arguments and copy ranges must still lie in live allocations: a
// graph that uses memory freed after capture is reported as a violation, not run.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulator.h"

namespace tapegrad_emu {

using Clock = std::map<CUstream_st*, uint64_t>;  // per stream: how many of its nodes are ordered before

struct Node {
  std::function<void()> work;
  std::string name;
  std::vector<TouchedRange> touched;
  int device = 0;
};

struct CaptureSequence {
  unsigned long long id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  CUstream_st* origin = nullptr;
  bool invalidated = false;
  std::string why;  // what invalidated it first
  std::vector<Node> nodes;
  std::set<CUstream_st*> streams;
  std::map<CUstream_st*, uint64_t> tails;  // nodes recorded per stream
  std::map<CUstream_st*, Clock> clocks;
  std::map<CUevent_st*, Clock> event_clocks;
};

}  // namespace tapegrad_emu

struct CUgraph_st {
  std::vector<tapegrad_emu::Node> nodes;
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<tapegrad_emu::Node>> nodes;
};

namespace tapegrad_emu {

namespace {

struct GraphState {
  std::set<CaptureSequence*> captures;  // begun, not ended
  std::set<CUgraph_st*> graphs;
  std::set<CUgraphExec_st*> execs;
  unsigned long long next_id = 0;
};

GraphState& graph_state() {
  static auto* s = new GraphState();  // never destroyed, like the runtime's state
  return *s;
}

thread_local cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;

const char* mode_name(cudaStreamCaptureMode m) {
  switch (m) {
    case cudaStreamCaptureModeGlobal:
      return "global";
    case cudaStreamCaptureModeThreadLocal:
      return "thread-local";
    case cudaStreamCaptureModeRelaxed:
      return "relaxed";
  }
  return "unknown";
}

void invalidate(CaptureSequence* c, const std::string& why) {
  if (c->invalidated) return;
  c->invalidated = true;
  c->why = why;
  c->nodes.clear();
}

// The ongoing capture an event was last recorded in, or null.
CaptureSequence* capture_of(const CUevent_st* e) {
  if (e->capture == nullptr || graph_state().captures.count(e->capture) == 0) return nullptr;
  return e->capture->id == e->capture_id ? e->capture : nullptr;
}

// Ongoing captures that hold a blocking stream of `device`: the legacy stream depends on them.
std::vector<CaptureSequence*> captures_blocking_legacy(int device) {
  std::vector<CaptureSequence*> out;
  for (CaptureSequence* c : graph_state().captures)
    for (CUstream_st* s : c->streams)
      if (s->device == device && s->blocking) {
        out.push_back(c);
        break;
      }
  return out;
}

bool is_legacy(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

}  // namespace

bool capture_record(CUstream_st* stream, std::function<void()>& work, const char* name,
                    std::vector<TouchedRange> touched) {
  CaptureSequence* c = stream->capture;
  if (c == nullptr) return false;
  if (c->invalidated) return true;  // the API call already returned the error
  c->nodes.push_back(Node{std::move(work), name, std::move(touched), stream->device});
  const uint64_t tail = ++c->tails[stream];
  c->clocks[stream][stream] = tail;
  return true;
}

cudaError_t capture_enqueue_check(CUstream_st* stream, const char* call) {
  if (stream->capture != nullptr && stream->capture->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated,
                std::string(call) + ": the stream's capture was invalidated earlier (" + stream->capture->why + ")");
  if (stream->legacy) {
    std::vector<CaptureSequence*> blocking = captures_blocking_legacy(stream->device);
    if (!blocking.empty()) {
      for (CaptureSequence* c : blocking)
        invalidate(c, std::string(call) + " used the legacy default stream while a blocking stream captured");
      return fail(cudaErrorStreamCaptureImplicit, std::string(call) +
                                                      ": the legacy default stream was used while a blocking stream "
                                                      "of its device captures");
    }
  }
  return cudaSuccess;
}

cudaError_t capture_sync_check(CUstream_st* stream, const char* call) {
  if (stream->capture != nullptr) {
    invalidate(stream->capture, std::string(call) + " waited for the capturing stream");
    return fail(cudaErrorStreamCaptureUnsupported,
                std::string(call) + ": the stream is capturing, its work does not run until the graph is launched");
  }
  if (stream->legacy) return capture_enqueue_check(stream, call);
  return cudaSuccess;
}

cudaError_t capture_unsafe_check(const char* call) {
  if (tls_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id me = std::this_thread::get_id();
  std::vector<CaptureSequence*> conflicts;
  for (CaptureSequence* c : graph_state().captures) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (c->thread == me || (tls_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal))
      conflicts.push_back(c);
  }
  if (conflicts.empty()) return cudaSuccess;
  for (CaptureSequence* c : conflicts) invalidate(c, std::string(call) + " was called during the capture");
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string(call) + ": not permitted during a stream capture (the calling thread's capture mode is " +
                  mode_name(tls_mode) + "; cudaThreadExchangeStreamCaptureMode can relax it)");
}

cudaError_t capture_device_sync_check(int device, const char* call) {
  bool any = false;
  for (CaptureSequence* c : graph_state().captures)
    for (CUstream_st* s : c->streams)
      if (s->device == device) {
        invalidate(c, std::string(call) + " waited for the device while one of its streams captured");
        any = true;
        break;
      }
  if (!any) return cudaSuccess;
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string(call) + ": a stream of cuda:" + std::to_string(device) + " is capturing");
}

cudaError_t capture_pageable_check(CUstream_st* stream, const char* call) {
  if (stream->capture == nullptr) return cudaSuccess;
  invalidate(stream->capture, std::string(call) + " copied between the device and pageable host memory");
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string(call) +
                  ": a copy between the device and pageable host memory cannot be captured "
                  "(use pinned memory)");
}

cudaError_t capture_event_record(CUevent_st* event, CUstream_st* stream, bool& handled) {
  handled = false;
  CaptureSequence* c = stream->capture;
  if (c == nullptr) {
    event->capture = nullptr;  // recorded outside any capture again
    return cudaSuccess;
  }
  handled = true;
  if (c->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated,
                "cudaEventRecord: the stream's capture was invalidated earlier (" + c->why + ")");
  event->capture = c;
  event->capture_id = c->id;
  c->event_clocks[event] = c->clocks[stream];
  return cudaSuccess;
}

cudaError_t capture_stream_wait(CUstream_st* stream, CUevent_st* event, bool& handled) {
  handled = false;
  CaptureSequence* from = capture_of(event);
  CaptureSequence* into = stream->capture;
  if (from == nullptr) {
    if (into == nullptr) return cudaSuccess;
    handled = true;
    if (!event->recorded) return cudaSuccess;  // nothing to wait for
    invalidate(into, "a capturing stream waited for an event recorded outside the capture");
    return fail(cudaErrorStreamCaptureIsolation,
                "cudaStreamWaitEvent: a capturing stream cannot wait for an event recorded outside its capture");
  }
  handled = true;
  if (into != nullptr && into != from) {
    invalidate(into, "cudaStreamWaitEvent would merge two captures");
    invalidate(from, "cudaStreamWaitEvent would merge two captures");
    return fail(cudaErrorStreamCaptureMerge, "cudaStreamWaitEvent: the event belongs to another capture");
  }
  if (from->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated,
                "cudaStreamWaitEvent: the event's capture was invalidated earlier (" + from->why + ")");
  if (into == nullptr) {  // the stream joins the capture
    stream->capture = from;
    from->streams.insert(stream);
  }
  Clock& clock = from->clocks[stream];
  for (const auto& [s, n] : from->event_clocks[event])
    if (clock[s] < n) clock[s] = n;
  return cudaSuccess;
}

cudaError_t capture_event_sync_check(CUevent_st* event, const char* call) {
  CaptureSequence* c = capture_of(event);
  if (c == nullptr) return cudaSuccess;
  invalidate(c, std::string(call) + " waited for an event recorded in the capture");
  return fail(cudaErrorCapturedEvent,
              std::string(call) + ": the event was last recorded in a stream that is still capturing");
}

void capture_forget_stream(CUstream_st* stream) {
  CaptureSequence* c = stream->capture;
  if (c == nullptr) return;
  invalidate(c, "a stream of the capture was destroyed");
  c->streams.erase(stream);
  stream->capture = nullptr;
  if (c->origin == stream) {  // nothing can end it any more
    for (CUstream_st* s : c->streams) s->capture = nullptr;
    graph_state().captures.erase(c);
    delete c;
  }
}

}  // namespace tapegrad_emu

using namespace tapegrad_emu;

#define EMU_LOCK std::lock_guard<std::recursive_mutex> emu_lock_(state_mutex())

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  EMU_LOCK;
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue, "cudaStreamBeginCapture: unknown capture mode");
  if (is_legacy(stream))
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: the legacy default stream cannot be captured (use a created stream)");
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: not a live stream");
  if (s->capture != nullptr)
    return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is capturing already");
  auto* c = new CaptureSequence();
  c->id = ++graph_state().next_id;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->streams.insert(s);
  c->clocks[s][s] = 0;
  s->capture = c;
  graph_state().captures.insert(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  EMU_LOCK;
  if (graph == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamEndCapture: null graph");
  *graph = nullptr;
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamEndCapture: not a live stream");
  CaptureSequence* c = s->capture;
  if (c == nullptr) return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  if (c->origin != s) {
    invalidate(c, "cudaStreamEndCapture was called on a stream that joined the capture, not the one that began it");
    return fail(cudaErrorStreamCaptureUnmatched,
                "cudaStreamEndCapture: the capture began on another stream; end it there");
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread,
                "cudaStreamEndCapture: a capture not begun in relaxed mode must end on the thread that began it");
  for (CUstream_st* member : c->streams) member->capture = nullptr;
  graph_state().captures.erase(c);
  std::unique_ptr<CaptureSequence> owned(c);
  if (c->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated: " + c->why);
  const Clock& joined = c->clocks[s];
  for (CUstream_st* member : c->streams) {
    if (member == s) continue;
    auto it = joined.find(member);
    const uint64_t seen = it == joined.end() ? 0 : it->second;
    if (c->tails[member] > seen)
      return fail(cudaErrorStreamCaptureUnjoined,
                  "cudaStreamEndCapture: a stream that joined the capture has work the origin stream does not wait "
                  "for (record an event on it and make the origin stream wait for it)");
  }
  auto* g = new CUgraph_st();
  g->nodes = std::move(c->nodes);
  graph_state().graphs.insert(g);
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id) {
  EMU_LOCK;
  if (status == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamGetCaptureInfo: null status");
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamGetCaptureInfo: not a live stream");
  if (s->legacy && !captures_blocking_legacy(s->device).empty())
    return fail(cudaErrorStreamCaptureImplicit,
                "cudaStreamIsCapturing: the legacy default stream was queried while a blocking stream captures");
  CaptureSequence* c = s->capture;
  *status = c == nullptr     ? cudaStreamCaptureStatusNone
            : c->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  if (id != nullptr && c != nullptr) *id = c->id;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return cudaStreamGetCaptureInfo(stream, status, nullptr);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return fail(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: null mode");
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: unknown mode");
  std::swap(*mode, tls_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  EMU_LOCK;
  (void)flags;
  if (exec == nullptr) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null result");
  if (graph == nullptr || graph_state().graphs.count(graph) == 0)
    return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: not a live graph");
  auto* e = new CUgraphExec_st();
  e->nodes = std::make_shared<const std::vector<Node>>(graph->nodes);
  graph_state().execs.insert(e);
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiateWithFlags(exec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  EMU_LOCK;
  if (exec == nullptr || graph_state().execs.count(exec) == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: not a live executable graph");
  CUstream_st* s = resolve_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: not a live stream");
  if (cudaError_t e = capture_enqueue_check(s, "cudaGraphLaunch"); e != cudaSuccess) return e;
  std::shared_ptr<const std::vector<Node>> nodes = exec->nodes;
  const int device = s->device;
  // The whole graph is one item of the stream: it starts after the work queued before it, and the
  // work queued after it starts after its last node.
  enqueue(s, [nodes, device] {
    for (const Node& n : *nodes) {
      for (const TouchedRange& r : n.touched) {
        if (r.pointer == nullptr || find_allocation(r.pointer, r.bytes) != nullptr) continue;
        report_violation(device, "graph replay: " + n.name + ": " + r.what +
                                     " is no longer inside a live allocation (memory captured in the graph was freed)");
        return;
      }
      n.work();
    }
  });
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  EMU_LOCK;
  if (exec == nullptr || graph_state().execs.erase(exec) == 0)
    return fail(cudaErrorInvalidValue, "cudaGraphExecDestroy: not a live executable graph");
  delete exec;  // a launch still queued keeps its nodes
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  EMU_LOCK;
  if (graph == nullptr || graph_state().graphs.erase(graph) == 0)
    return fail(cudaErrorInvalidValue, "cudaGraphDestroy: not a live graph");
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
