// When the CPU LSTM recurrence takes its batch-1 path, and on how many threads (Note [batch-1
// recurrence split by hidden units] in lstm.cpp). Declared for the tests that check both.
#pragma once

#include <cstdint>

#include "tapegrad/core/dtype.h"

namespace tapegrad::cpu {

// A batch of one row in float32 with float32 products, on a CPU with AVX-512.
bool lstm_batch1_path_applies(int64_t batch, DType dtype, bool bf16_products);

// The threads that share its hidden units: 1 when the machine, the calling context (a parallel
// region) or the work (steps x the step's multiply-adds) does not pay for more.
int lstm_batch1_parts(int64_t steps, int64_t hidden, int64_t input);

}  // namespace tapegrad::cpu
