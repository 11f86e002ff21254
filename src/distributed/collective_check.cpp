// Describing a collective call and comparing the descriptions of all ranks.
#include "distributed/collective_check.h"

#include <algorithm>

namespace tapegrad::distributed::detail {

using ::tapegrad::detail::str_cat;
using ::tapegrad::detail::throw_error;

namespace {

// Word layout of CollectiveDesc.
enum : int {
  kKind,
  kDType,
  kOp,
  kRoot,
  kDevice,
  kNdim,
  kNumel,
  kShapeHash,
  kTailHash,
  kPiecesHash,
  kIteration,
  kSizes
};
static_assert(kSizes + CollectiveDesc::kMaxDims == CollectiveDesc::kLength);

int64_t hash_dims(const Shape& sizes, size_t first, int64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ uint64_t(seed);
  for (size_t i = first; i < sizes.size(); ++i) h = (h ^ uint64_t(sizes[i])) * 1099511628211ULL;
  return int64_t(h >> 1);
}

std::string describe_tensor(const CollectiveDesc& d) {
  const auto& w = d.words;
  std::string s = str_cat(dtype_name(DType(w[kDType])), " ");
  if (w[kNdim] > CollectiveDesc::kMaxDims)
    return s + str_cat("tensor of ", w[kNdim], " dims, ", w[kNumel], " elements");
  return s + shape_str(d.shape());
}

thread_local int64_t t_iteration = -1;

}  // namespace

IterationScope::IterationScope(int64_t iteration) : previous_(t_iteration) {
  t_iteration = iteration;
}
IterationScope::~IterationScope() {
  t_iteration = previous_;
}

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::AllGather:
      return "all_gather";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::Barrier:
      return "barrier";
    case Collective::Bootstrap:
      return "NCCL bootstrap";
  }
  return "unknown collective";
}

Shape CollectiveDesc::shape() const {
  int64_t ndim = std::min<int64_t>(words[kNdim], kMaxDims);
  return Shape(words.begin() + kSizes, words.begin() + kSizes + ndim);
}

CollectiveDesc describe(Collective kind, const Tensor& tensor, ReduceOp op, int root,
                        const std::vector<Tensor>& pieces) {
  CollectiveDesc d;
  auto& w = d.words;
  w[kKind] = int64_t(kind);
  w[kOp] = int64_t(op);
  w[kRoot] = root;
  w[kIteration] = t_iteration;
  if (tensor.defined()) {
    const Shape& sizes = tensor.sizes();
    w[kDType] = int64_t(tensor.dtype());
    w[kDevice] = int64_t(tensor.device().kind());
    w[kNdim] = int64_t(sizes.size());
    w[kNumel] = tensor.numel();
    w[kShapeHash] = hash_dims(sizes, 0, 0);
    w[kTailHash] = hash_dims(sizes, 1, 0);
    for (size_t i = 0; i < sizes.size() && i < size_t(CollectiveDesc::kMaxDims); ++i) w[kSizes + i] = sizes[i];
  }
  int64_t pieces_hash = int64_t(pieces.size());
  for (const Tensor& piece : pieces) pieces_hash = hash_dims(piece.sizes(), 0, pieces_hash);
  w[kPiecesHash] = pieces_hash;
  return d;
}

std::string find_mismatch(const std::vector<CollectiveDesc>& ranks, int64_t sequence) {
  if (ranks.empty()) return "";
  const CollectiveDesc& first = ranks[0];
  const char* name = collective_name(first.kind());
  for (size_t r = 1; r < ranks.size(); ++r) {
    const auto& a = first.words;
    const auto& b = ranks[r].words;
    auto at = [&](const std::string& what) {
      return str_cat("ProcessGroup: ", name, " (collective number ", sequence, " of this group): ", what);
    };
    if (a[kKind] != b[kKind])
      return str_cat("ProcessGroup: collectives called out of order (collective number ", sequence,
                     " of this group): rank 0 called ", name, ", rank ", r, " called ",
                     collective_name(ranks[r].kind()));
    if (a[kIteration] != b[kIteration]) {
      std::string by_rank;
      for (size_t q = 0; q < ranks.size(); ++q) {
        int64_t it = ranks[q].words[kIteration];
        by_rank +=
            str_cat(q == 0 ? "" : ", ", "rank ", q, ": ", it < 0 ? std::string("not DDP") : str_cat("iteration ", it));
      }
      return at(str_cat("the ranks are at different DistributedDataParallel iterations (", by_rank,
                        "): a rank skipped or added a forward/backward, so its gradients would be averaged with ",
                        "another iteration's"));
    }
    Collective kind = first.kind();
    if (kind == Collective::Barrier || kind == Collective::Bootstrap) continue;
    if (a[kDevice] != b[kDevice])
      return at(str_cat("rank 0 passed a ", device_kind_name(DeviceKind(a[kDevice])), " tensor, rank ", r, " a ",
                        device_kind_name(DeviceKind(b[kDevice])), " tensor"));
    bool same_shape = a[kNdim] == b[kNdim] && a[kShapeHash] == b[kShapeHash];
    if (kind == Collective::AllGather) same_shape = a[kNdim] == b[kNdim] && a[kTailHash] == b[kTailHash];
    if (kind == Collective::ReduceScatter) same_shape = a[kPiecesHash] == b[kPiecesHash];
    if (a[kDType] != b[kDType] || !same_shape) {
      std::string rule = kind == Collective::AllGather       ? " (all_gather needs the same dtype and the same sizes "
                                                               "after dim 0)"
                         : kind == Collective::ReduceScatter ? " (reduce_scatter needs the same dtype and the same "
                                                               "list of input shapes on every rank)"
                                                             : "";
      return at(
          str_cat("got ", describe_tensor(first), " on rank 0 but ", describe_tensor(ranks[r]), " on rank ", r, rule));
    }
    if ((kind == Collective::AllReduce || kind == Collective::ReduceScatter) && a[kOp] != b[kOp])
      return at(str_cat("reduce op ", reduce_op_name(ReduceOp(a[kOp])), " on rank 0 but ",
                        reduce_op_name(ReduceOp(b[kOp])), " on rank ", r));
    if (kind == Collective::Broadcast && a[kRoot] != b[kRoot])
      return at(str_cat("root ", a[kRoot], " on rank 0 but ", b[kRoot], " on rank ", r));
  }
  return "";
}

}  // namespace tapegrad::distributed::detail
