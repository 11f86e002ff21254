// Note [measured choice of the split]: the batch-1 recurrence split by hidden units (Note [batch-1
// recurrence split by hidden units] in lstm.cpp) meets the other thread every step, about every
// microsecond, so it is fast only while both threads keep their cores and the two cores pass h_t
// between them quickly. On a shared or virtual machine that changes from minute to minute: measured
// on the same 2-vCPU machine, the same binary ran a `lstm_small`:1 training step in 0.20 ms and,
// minutes later, in 0.46 ms, where one thread takes 0.27 ms throughout. Both ways give the same
// bits, so each kind of call (direction, shape, team size) picks by speed alone (Note [measured
// choice between one thread and a team], cpu/loops/split_choice.h).
#include "cpu/kernels/lstm_split.h"

#include <map>
#include <mutex>
#include <tuple>

namespace tapegrad::cpu {

bool SplitKind::operator<(const SplitKind& o) const {
  return std::tie(hidden, input, backward, max_parts, weights_beside) <
         std::tie(o.hidden, o.input, o.backward, o.max_parts, o.weights_beside);
}

namespace {
struct Registry {
  std::mutex mutex;
  std::map<SplitKind, SplitChoice> choices;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: calls may come from threads at exit
  return *r;
}
}  // namespace

int lstm_split_choose(const SplitKind& kind) {
  if (kind.max_parts <= 1) return 1;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.choices[kind].choose(kind.max_parts);
}

void lstm_split_record(const SplitKind& kind, int parts, double ns_per_step) {
  if (kind.max_parts <= 1) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.choices[kind].record(parts, kind.max_parts, ns_per_step);
}

void lstm_split_forget_timings() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.choices.clear();
}

}  // namespace tapegrad::cpu
