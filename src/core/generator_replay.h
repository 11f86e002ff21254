// Note [generator replay]: how checkpoint() gives a recomputation the random numbers of its forward
// pass, whichever generators it drew them from. Internal to the library.
//
// While a GeneratorRecording is alive on a thread, every draw that thread makes from any Generator
// (Generator::reserve) is noted: which generator (by its id, never by address, so a generator
// destroyed since is never touched), how many numbers, and the (seed, offset) it got. While a
// GeneratorReplay of that record is alive, a draw from a recorded generator gets the recorded
// (seed, offset) back, in order, and the generator itself is not touched. So the recomputation draws
// the forward's numbers, every generator stays where the program left it (also when fn throws),
// and another thread drawing from the same generator meanwhile changes nothing.
//
// A replay is strict: fn must make the same draws again. A draw of another size, more draws from a
// generator than the forward made, a draw from a generator that existed when the forward began but
// that it did not draw from (a Dropout switched to train() in between), or fewer draws (one switched
// to eval()) throw tapegrad::Error. A generator made after the forward began (a local one in fn) is
// fresh each time and draws as usual. Draws made by other threads are not seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tapegrad::detail {

// What a recording holds: each generator's draws in order, and where generator ids began when it
// started (a smaller id is a generator that existed before the forward).
struct GeneratorDraws {
  struct Draw {
    uint64_t seed, offset, count;
  };
  struct PerGenerator {
    uint64_t id;
    std::vector<Draw> draws;
  };
  uint64_t first_new_id = 0;
  std::vector<PerGenerator> generators;
};

// Notes this thread's draws into `into` while alive; recordings nest (a draw goes to each).
class GeneratorRecording {
 public:
  explicit GeneratorRecording(GeneratorDraws& into);
  ~GeneratorRecording();
  GeneratorRecording(const GeneratorRecording&) = delete;
  GeneratorRecording& operator=(const GeneratorRecording&) = delete;
};

// Hands this thread's draws from the recorded generators their recorded numbers while alive; the
// innermost replay decides. `what` names the caller in errors ("checkpoint").
class GeneratorReplay {
 public:
  GeneratorReplay(const GeneratorDraws& from, const char* what);
  ~GeneratorReplay();
  GeneratorReplay(const GeneratorReplay&) = delete;
  GeneratorReplay& operator=(const GeneratorReplay&) = delete;
  // Throws unless every recorded draw from a generator older than the forward was made again.
  void expect_all_drawn() const;

  // Called by Generator::reserve: whether this thread has a replay for generator `id` and, if so,
  // the numbers to use; throws for a draw the forward did not make.
  static bool replayed(uint64_t id, uint64_t count, uint64_t& seed, uint64_t& offset);

 private:
  const GeneratorDraws& from_;
  const char* what_;
  std::vector<size_t> next_;  // per recorded generator, the next draw to hand out
  GeneratorReplay* previous_;
};

// Called by Generator::reserve after each draw: notes it in this thread's recordings, if any.
void note_generator_draw(uint64_t id, uint64_t count, uint64_t seed, uint64_t offset);

// The id the next Generator gets (ids increase from 1 in construction order).
uint64_t next_generator_id();
uint64_t new_generator_id();

}  // namespace tapegrad::detail
