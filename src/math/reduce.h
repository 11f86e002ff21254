// Max/Min selection shared by the CPU reductions and the CUDA ones: NaN propagates (a NaN beats
// every number and the first NaN stays), and ties keep the first position, like PyTorch's max(dim).
#pragma once

#include <cstdint>

#include "math/host_device.h"

namespace tapegrad::math {

template <class T>
TG_HD bool is_nan(T value) {
  return value != value;  // false for integers
}

// Whether `candidate` replaces `best` in a Max (is_max) or Min scan in index order.
template <class T>
TG_HD bool extreme_replaces(bool is_max, T candidate, T best) {
  if (is_nan(candidate)) return !is_nan(best);
  if (is_nan(best)) return false;
  return is_max ? candidate > best : candidate < best;
}

// The same choice between two partial results of a parallel scan over disjoint parts, each
// carrying the index of its extreme: equal values (and two NaNs) go to the lower index, so the
// combination gives the first extreme whatever order the parts are combined in.
template <class T>
TG_HD bool extreme_with_index_replaces(bool is_max, T candidate, int64_t candidate_index, T best, int64_t best_index) {
  if (extreme_replaces(is_max, candidate, best)) return true;
  if (extreme_replaces(is_max, best, candidate)) return false;
  return candidate_index < best_index;
}

}  // namespace tapegrad::math
