// A contiguous shape seen around one dim as [outer, size(dim), inner]: how the index kernels of
// every backend (index_select, index_add, gather, scatter_add) address their tensors.
#pragma once

#include <cstdint>

#include "tapegrad/core/shape.h"

namespace tapegrad::backend {

struct Around {
  int64_t outer = 1, extent = 1, inner = 1;
};

inline Around around(const Shape& sizes, int64_t dim) {
  Around a;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim)
      a.outer *= sizes[d];
    else if (d == dim)
      a.extent = sizes[d];
    else
      a.inner *= sizes[d];
  }
  return a;
}

}  // namespace tapegrad::backend
