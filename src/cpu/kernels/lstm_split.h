// When the CPU LSTM recurrence takes its batch-1 path, and whether its threads split the hidden units
// between them (Note [batch-1 recurrence split by hidden units] in lstm.cpp) or one thread runs it,
// the latter measured (Note [measured choice of the split] in lstm_split.cpp). Declared for
// lstm.cpp and its tests.
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

// Whether a batch-sliced forward with float32 products reads [W_ih^T; W_hh^T], and its backward
// W_hh, laid out as panels at this shape (Note [recurrent weights laid out as panels] in lstm.cpp),
// as things stand now; and the switch that turns both layouts off (tests: the bits must not change).
bool lstm_forward_reads_panels(int64_t steps, int64_t batch, int64_t hidden, int64_t input);
bool lstm_backward_reads_panels(int64_t steps, int64_t batch, int64_t hidden);
void set_lstm_weight_panels(bool on);

// Whether the float32 forward cell runs its activations in AVX-512 registers where the CPU has them
// (Note [activations in AVX-512 registers] in cpu/loops/vec_math_avx512.h) or through the compiler's
// vectorisation of vec_math.h (tests: the bits must not change).
void set_lstm_cell_in_registers(bool on);

// Whether the backward makes its weight gradients step by step at this shape (Note [weight gradients
// step by step] in lstm.cpp), or at batch 1 beside the recurrence (Note [weight gradients beside the
// batch-1 recurrence]): the lstm_recurrence_backward_weights slot takes the call.
bool lstm_weight_grads_by_step(int64_t steps, int64_t batch, int64_t hidden, int64_t input, DType dtype);
// Batch-1 backward calls so far whose weight gradients a second thread made (tests).
int64_t lstm_batch1_weight_calls_beside();

// One kind of call: a direction of the recurrence at one shape and team size. With weights_beside,
// the backward's choice between its weight gradients beside the recurrence (the team way) and after
// it (Note [weight gradients beside the batch-1 recurrence] in lstm.cpp).
struct SplitKind {
  int64_t hidden, input;
  bool backward;
  int max_parts;
  bool weights_beside = false;
  bool operator<(const SplitKind& o) const;
};
int lstm_split_choose(const SplitKind& kind);
void lstm_split_record(const SplitKind& kind, int parts, double ns_per_step);
// Forgets every measurement (tests: the next calls of each kind start with the split by units).
void lstm_split_forget_timings();

}  // namespace tapegrad::cpu
