// Many tensors, few launches (after PyTorch's multi_tensor_apply): the addresses and sizes of up to
// kMaxTensors lists of `Depth` tensors (param, grad, state...) travel in the kernel's arguments,
// each tensor is cut into chunks of kChunkElements, and each block of a launch handles one chunk.
// A tensor too large for the blocks left in one launch continues in the next.
// Shared by optim.cu and amp.cu.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/launch.h"

namespace tapegrad::cuda_backend {

// The emulation build, where each element is an emulated thread, cuts smaller chunks so that a test
// reaches a tensor spanning several launches (kMaxBlocksPerLaunch chunks) in seconds, through the
// same code.
#ifdef TAPEGRAD_CUDA_EMULATED
constexpr int64_t kChunkElements = 4096;
#else
constexpr int64_t kChunkElements = 65536;
#endif
constexpr int kMultiTensorThreads = 512;

// Tensors per launch for each depth, keeping the whole argument block under the 4 KiB that every
// CUDA version and architecture accepts.
template <int Depth>
constexpr int max_tensors_per_launch() {
  return Depth <= 1 ? 110 : Depth == 2 ? 64 : Depth == 3 ? 48 : Depth == 4 ? 36 : 30;
}
constexpr int kMaxBlocksPerLaunch = 320;

template <int Depth>
struct TensorListMetadata {
  static constexpr int kMaxTensors = max_tensors_per_launch<Depth>();
  void* addresses[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  uint8_t block_to_tensor[kMaxBlocksPerLaunch];
  int32_t block_to_chunk[kMaxBlocksPerLaunch];
};
static_assert(sizeof(TensorListMetadata<5>) + 128 <= 4096, "multi-tensor arguments exceed 4 KiB");
static_assert(sizeof(TensorListMetadata<3>) + 128 <= 4096, "multi-tensor arguments exceed 4 KiB");

// The elements [begin, end) of tensor `tensor` that this block handles.
struct BlockChunk {
  int tensor;
  int64_t begin, end;
};

template <int Depth>
__device__ __forceinline__ BlockChunk block_chunk(const TensorListMetadata<Depth>& meta) {
  const int tensor = meta.block_to_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(meta.block_to_chunk[blockIdx.x]) * kChunkElements;
  const int64_t end = begin + kChunkElements < meta.numel[tensor] ? begin + kChunkElements : meta.numel[tensor];
  return {tensor, begin, end};
}

// One list entry: the Depth addresses of one tensor group (nullptr for unused state) and its size.
template <int Depth>
struct TensorGroup {
  std::array<void*, Depth> addresses;
  int64_t numel;
};

// Calls launch(meta, blocks) as many times as needed to cover every element of every group; the
// launch function starts a kernel of `blocks` blocks of kMultiTensorThreads that reads
// block_chunk(meta). Empty groups are skipped.
template <int Depth, class Launch>
void multi_tensor_apply(const std::vector<TensorGroup<Depth>>& groups, const Launch& launch) {
  using Meta = TensorListMetadata<Depth>;
  Meta meta{};
  int tensors = 0, blocks = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t numel = groups[g].numel;
    if (numel == 0) continue;
    for (int d = 0; d < Depth; ++d) meta.addresses[d][tensors] = groups[g].addresses[d];
    meta.numel[tensors] = numel;
    ++tensors;
    const int64_t chunks = (numel + kChunkElements - 1) / kChunkElements;
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_to_tensor[blocks] = static_cast<uint8_t>(tensors - 1);
      meta.block_to_chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool tensor_done = c == chunks - 1;
      if (blocks < kMaxBlocksPerLaunch && !(tensor_done && tensors == Meta::kMaxTensors)) continue;
      launch(meta, blocks);  // the arguments are copied at launch, so meta may be refilled at once
      blocks = 0;
      if (tensor_done) {
        tensors = 0;
      } else {  // the unfinished tensor moves to slot 0 of the next launch
        for (int d = 0; d < Depth; ++d) meta.addresses[d][0] = meta.addresses[d][tensors - 1];
        meta.numel[0] = meta.numel[tensors - 1];
        tensors = 1;
      }
    }
  }
  if (blocks > 0) launch(meta, blocks);
}

}  // namespace tapegrad::cuda_backend
