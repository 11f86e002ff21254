// When the CPU LSTM recurrence takes its batch-1 path, and on how many threads (Note [batch-1
// recurrence split by hidden units] in lstm.cpp), the latter chosen by measurement (Note [measured
// choice of the batch-1 split] in lstm_batch1.cpp). Declared for lstm.cpp and its tests.
#pragma once

#include <cstdint>

#include "cpu/loops/split_choice.h"
#include "tapegrad/core/dtype.h"

namespace tapegrad::cpu {

// A batch of one row in float32 with float32 products, on a CPU with AVX-512.
bool lstm_batch1_path_applies(int64_t batch, DType dtype, bool bf16_products);

// The threads that share its hidden units: 1 when the machine, the calling context (a parallel
// region) or the work (steps x the step's multiply-adds) does not pay for more.
int lstm_batch1_parts(int64_t steps, int64_t hidden, int64_t input);

// One kind of call: a direction of the recurrence at one shape and team size.
struct Batch1Kind {
  int64_t hidden, input;
  bool backward;
  int max_parts;
  bool operator<(const Batch1Kind& o) const;
};
int lstm_batch1_choose(const Batch1Kind& kind);
void lstm_batch1_record(const Batch1Kind& kind, int parts, double ns_per_step);
// Forgets every measurement (tests: the next calls of each kind start with the split).
void lstm_batch1_forget_timings();

}  // namespace tapegrad::cpu
