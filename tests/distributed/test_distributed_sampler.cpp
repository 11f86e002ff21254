// DistributedSampler: PyTorch's shard sizes, padding and drop_last, disjoint shards that cover the
// dataset, the DataLoader's permutation, and the same order after a resume. No MPI needed.
#include <algorithm>
#include <set>

#include "support/test_util.h"
#include "tapegrad/distributed/sampler.h"

namespace tapegrad {
namespace {

using distributed::DistributedSampler;
using distributed::DistributedSamplerOptions;

std::vector<std::vector<int64_t>> shards(int64_t n, int ranks, int64_t epoch, DistributedSamplerOptions options) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(DistributedSampler(n, ranks, r, options).indices(epoch));
  return out;
}

TEST(DistributedSampler, PaddedShardsCoverTheDatasetOnce) {
  // 10 examples on 3 ranks: 4 each, 12 in all, the first 2 of the permutation repeated at the end.
  auto parts = shards(10, 3, 0, DistributedSamplerOptions().seed(5));
  std::vector<int64_t> all;
  for (const auto& p : parts) {
    EXPECT_EQ(p.size(), 4u);
    all.insert(all.end(), p.begin(), p.end());
  }
  std::multiset<int64_t> counts(all.begin(), all.end());
  for (int64_t i = 0; i < 10; ++i) EXPECT_GE(counts.count(i), 1u) << "index " << i << " missing";
  EXPECT_EQ(all.size(), 12u);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 10u);
}

TEST(DistributedSampler, DropLastGivesDisjointEqualShards) {
  auto parts = shards(10, 3, 2, DistributedSamplerOptions().drop_last(true).seed(5));
  std::set<int64_t> seen;
  for (const auto& p : parts) {
    EXPECT_EQ(p.size(), 3u);
    for (int64_t i : p) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " on two ranks";
  }
  EXPECT_EQ(DistributedSampler(10, 3, 0, DistributedSamplerOptions().drop_last(true)).total_size(), 9);
}

TEST(DistributedSampler, WithoutShuffleRanksTakeStridedPositions) {
  // PyTorch: indices [0..n) padded to 12, then rank r takes r, r + 3, ...
  auto parts = shards(10, 3, 0, DistributedSamplerOptions().shuffle(false));
  EXPECT_EQ(parts[0], (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(parts[1], (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(parts[2], (std::vector<int64_t>{2, 5, 8, 1}));
  // Padding repeats the dataset as often as needed when it is smaller than the rank count.
  auto tiny = shards(2, 5, 0, DistributedSamplerOptions().shuffle(false));
  EXPECT_EQ(tiny[4], (std::vector<int64_t>{0}));
  EXPECT_EQ(tiny[2], (std::vector<int64_t>{0}));
}

TEST(DistributedSampler, ShuffleIsTheDataLoadersPermutationPerEpoch) {
  // With one replica the sampler's order is DataLoader(shuffle, seed)'s order.
  TensorDataset data(arange(0, 23, 1, kFloat32).reshape({23, 1}), zeros({23}, kInt64));
  DataLoaderOptions loader_options;
  loader_options.shuffle = true;
  loader_options.seed = 9;
  DataLoader loader(data, loader_options);
  DistributedSampler single(23, 1, 0, DistributedSamplerOptions().seed(9));
  for (int64_t epoch : {0, 1, 4}) EXPECT_EQ(single.indices(epoch), loader.order(epoch)) << "epoch " << epoch;
  // Epochs reshuffle (negative control for a sampler that ignores the epoch).
  EXPECT_NE(single.indices(0), single.indices(1));
}

TEST(DistributedSampler, ResumingAtAnEpochGivesTheSameOrder) {
  DistributedSampler run(50, 4, 2, DistributedSamplerOptions().seed(3));
  std::vector<std::vector<int64_t>> seen;
  for (int64_t e = 0; e < 4; ++e) {
    run.set_epoch(e);
    seen.push_back(run.indices());
  }
  DistributedSampler resumed(50, 4, 2, DistributedSamplerOptions().seed(3));
  resumed.set_epoch(3);
  EXPECT_EQ(resumed.indices(), seen[3]);
  EXPECT_EQ(resumed.epoch(), 3);
  // Another seed gives another order.
  EXPECT_NE(DistributedSampler(50, 4, 2, DistributedSamplerOptions().seed(4)).indices(3), seen[3]);
}

TEST(DistributedSampler, Batches) {
  DistributedSampler s(10, 2, 1, DistributedSamplerOptions().shuffle(false));  // 1, 3, 5, 7, 9
  EXPECT_EQ(s.batches(2), (std::vector<std::vector<int64_t>>{{1, 3}, {5, 7}, {9}}));
  EXPECT_EQ(s.batches(2, true), (std::vector<std::vector<int64_t>>{{1, 3}, {5, 7}}));
  EXPECT_EQ(DistributedSampler(0, 2, 1).indices(), std::vector<int64_t>{});
}

TEST(DistributedSampler, BadArguments) {
  testing::expect_error([] { DistributedSampler(10, 0, 0); }, {"DistributedSampler", "num_replicas"});
  testing::expect_error([] { DistributedSampler(10, 2, 2); }, {"DistributedSampler", "rank 2", "[0, 2)"});
  testing::expect_error([] { DistributedSampler(-1, 2, 0); }, {"DistributedSampler", "dataset_size"});
  testing::expect_error([] { DistributedSampler(10, 2, 0).batches(0); }, {"batches", "batch_size"});
}

}  // namespace
}  // namespace tapegrad
