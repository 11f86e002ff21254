// What each rank was asked to do in one collective, as a fixed row of integers that the ranks
// exchange (one small all-gather) and compare before the collective runs, so that mismatched
// calls fail on every rank with the same message instead of hanging or exchanging garbage.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/distributed/process_group.h"

namespace tapegrad::distributed::detail {

enum class Collective : int64_t { AllReduce = 1, Broadcast, AllGather, ReduceScatter, Barrier, Bootstrap };
const char* collective_name(Collective kind);

struct CollectiveDesc {
  static constexpr int kMaxDims = 8;  // shapes of more dims are compared by hash only
  static constexpr int kLength = 11 + kMaxDims;
  std::array<int64_t, kLength> words{};

  Collective kind() const { return Collective(words[0]); }
  Shape shape() const;  // the tensor's shape (first kMaxDims dims)
  int64_t numel() const { return words[6]; }
};

// The DistributedDataParallel iteration the calling thread's collectives belong to (-1: none), put
// into their descriptions so that ranks at different iterations fail instead of pairing up (a
// rank that skipped a backward would otherwise reduce its gradients with another iteration's).
class IterationScope {
 public:
  explicit IterationScope(int64_t iteration);
  ~IterationScope();
  IterationScope(const IterationScope&) = delete;
  IterationScope& operator=(const IterationScope&) = delete;

 private:
  int64_t previous_;
};

// `tensor` may be undefined (barrier). `pieces` are reduce_scatter's inputs; `root` broadcast's.
CollectiveDesc describe(Collective kind, const Tensor& tensor, ReduceOp op = ReduceOp::Sum, int root = -1,
                        const std::vector<Tensor>& pieces = {});

// The error message for the first way the ranks' descriptions (in rank order) disagree, or "" when
// they agree. `sequence` numbers the collective within its group, for the message.
std::string find_mismatch(const std::vector<CollectiveDesc>& ranks, int64_t sequence);

}  // namespace tapegrad::distributed::detail
