// Profiler: a session of the recorder (recorder.cpp) and its results.
#include "tapegrad/profiler/profiler.h"

#include <cstdio>

#include "profiler/record.h"
#include "tapegrad/core/error.h"

namespace tapegrad::profiler {

const char* event_kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::Kernel:
      return "kernel";
    case EventKind::Autograd:
      return "autograd";
    case EventKind::Range:
      return "range";
  }
  return "?";
}

Profiler::Profiler(ProfilerOptions options, bool start_now) : options_(options) {
  if (start_now) start();
}

Profiler::~Profiler() {
  if (!running_) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "profiler: stopping at destruction failed: %s\n", e.what());
  }
}

void Profiler::start() {
  TG_CHECK(!running_, "profiler::Profiler::start: this profiler is already running (call stop() first)");
  session_ = detail::begin_session(options_);
  running_ = true;
  events_.clear();
  memory_.clear();
  devices_.clear();
}

void Profiler::stop() {
  TG_CHECK(running_, "profiler::Profiler::stop: the profiler is not running (stop() without start())");
  running_ = false;
  detail::SessionResult result = detail::end_session(session_);
  events_ = std::move(result.events);
  memory_ = std::move(result.memory);
  devices_ = std::move(result.devices);
}

KeyAverages Profiler::key_averages(bool group_by_input_shape) const {
  TG_CHECK(!running_, "profiler::Profiler::key_averages: the profiler is still running (call stop() first)");
  return KeyAverages(events_, group_by_input_shape);
}

}  // namespace tapegrad::profiler
