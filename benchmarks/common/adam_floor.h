// Adam's memory floor on the CPU: the reads and writes of its step alone (param, grad and both moments
// read; param and moments written), with one addition each, shared among the threads in contiguous
// ranges as Adam shares them. While a model's parameters, gradients and moments do not fit in the
// cores' caches, its Adam step cannot take less; set beside the step's optimiser phase it says how much
// of that phase any Adam could still save.
#pragma once

#include <tapegrad/tapegrad.h>

#include <cstdint>

namespace tapegrad::bench {

// One pass over n elements of the four streams, on `threads` OpenMP threads (at least one).
void adam_streams_pass(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, int threads);

// The four streams of `parameters` floats in tapegrad's CPU tensors, allocated as Adam's state is.
class AdamStreams {
 public:
  explicit AdamStreams(int64_t parameters);
  void pass(int threads);  // one adam_streams_pass over all of them
  int64_t size() const { return size_; }

 private:
  int64_t size_;
  Tensor param_, grad_, exp_avg_, exp_avg_sq_;
};

// The median time in ms of a pass over `parameters` elements, from passes totalling about `budget_s`
// seconds (at least 5 after one warm-up); 0 for no parameters.
double adam_memory_floor_ms(int64_t parameters, int threads, double budget_s = 0.05);

}  // namespace tapegrad::bench
