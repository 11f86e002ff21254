// The per-thread recording and replay of generator draws behind checkpoint() (Note [generator
// replay] in generator_replay.h).
#include "core/generator_replay.h"

#include <atomic>

#include "tapegrad/core/error.h"
#include "tapegrad/core/generator.h"

namespace tapegrad::detail {

namespace {

std::atomic<uint64_t> g_next_id{1};
thread_local std::vector<GeneratorDraws*> t_recordings;
thread_local GeneratorReplay* t_replay = nullptr;

const char* const kSameWork =
    "; fn must do the same work each time (was a module switched between train() and eval() before backward?)";

}  // namespace

uint64_t next_generator_id() {
  return g_next_id.load();
}
uint64_t new_generator_id() {
  return g_next_id.fetch_add(1);
}

GeneratorRecording::GeneratorRecording(GeneratorDraws& into) {
  // The default generator is made on first use; made here, it counts as existing before the
  // forward, so a recomputation that draws from it unexpectedly is caught.
  default_generator();
  into.first_new_id = next_generator_id();
  t_recordings.push_back(&into);
}

GeneratorRecording::~GeneratorRecording() {
  t_recordings.pop_back();
}

void note_generator_draw(uint64_t id, uint64_t count, uint64_t seed, uint64_t offset) {
  for (GeneratorDraws* r : t_recordings) {
    GeneratorDraws::PerGenerator* mine = nullptr;
    for (GeneratorDraws::PerGenerator& g : r->generators)
      if (g.id == id) mine = &g;
    if (mine == nullptr) {
      r->generators.push_back({id, {}});
      mine = &r->generators.back();
    }
    mine->draws.push_back({seed, offset, count});
  }
}

GeneratorReplay::GeneratorReplay(const GeneratorDraws& from, const char* what)
    : from_(from), what_(what), next_(from.generators.size(), 0), previous_(t_replay) {
  t_replay = this;
}

GeneratorReplay::~GeneratorReplay() {
  t_replay = previous_;
}

bool GeneratorReplay::replayed(uint64_t id, uint64_t count, uint64_t& seed, uint64_t& offset) {
  GeneratorReplay* r = t_replay;
  if (r == nullptr) return false;
  const std::vector<GeneratorDraws::PerGenerator>& generators = r->from_.generators;
  for (size_t i = 0; i < generators.size(); ++i) {
    if (generators[i].id != id) continue;
    const std::vector<GeneratorDraws::Draw>& draws = generators[i].draws;
    size_t& next = r->next_[i];
    TG_CHECK(next < draws.size(), r->what_, ": the recomputation in backward drew from a generator more than the ",
             draws.size(), " times the forward pass drew from it", kSameWork);
    const GeneratorDraws::Draw& d = draws[next];
    TG_CHECK(d.count == count, r->what_, ": the recomputation in backward drew ", count,
             " random numbers from a generator where the forward pass drew ", d.count, kSameWork);
    ++next;
    seed = d.seed;
    offset = d.offset;
    return true;
  }
  TG_CHECK(id >= r->from_.first_new_id, r->what_, ": the recomputation in backward drew ", count,
           " random numbers from a generator the forward pass did not draw from", kSameWork);
  return false;  // a generator made since the forward began: fresh each time
}

void GeneratorReplay::expect_all_drawn() const {
  for (size_t i = 0; i < from_.generators.size(); ++i) {
    const GeneratorDraws::PerGenerator& g = from_.generators[i];
    if (g.id >= from_.first_new_id) continue;  // made by fn; the recomputation made another one
    TG_CHECK(next_[i] == g.draws.size(), what_, ": the recomputation in backward drew from a generator ", next_[i],
             " times where the forward pass drew from it ", g.draws.size(), " times", kSameWork);
  }
}

}  // namespace tapegrad::detail
