// Emulation build: the part of CUDA's cooperative groups that tapegrad's kernels use: the grid
// group of a cooperative launch and its barrier (grid_runner.cpp, Note [cooperative grids]).
#pragma once

#include "cuda_emulator/device_code.h"

namespace cooperative_groups {

class grid_group {
 public:
  void sync() const { ::tapegrad_emu::sync_grid(); }
  unsigned long long num_blocks() const {
    const dim3 g = gridDim;
    return static_cast<unsigned long long>(g.x) * g.y * g.z;
  }
  unsigned long long block_rank() const {
    const dim3 g = gridDim;
    const uint3 b = blockIdx;
    return b.x + static_cast<unsigned long long>(g.x) * (b.y + static_cast<unsigned long long>(g.y) * b.z);
  }
};

inline grid_group this_grid() {
  return grid_group();
}

}  // namespace cooperative_groups
