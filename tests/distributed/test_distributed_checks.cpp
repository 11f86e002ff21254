// The cross-rank comparison of collective calls (src/distributed/collective_check.h), on made-up
// descriptions of several ranks: every kind of mismatch gives a message naming the collective,
// both ranks and both values, and agreeing calls give none. No MPI needed.
#include "distributed/collective_check.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using namespace distributed::detail;
using distributed::ReduceOp;

void expect_mismatch(const std::vector<CollectiveDesc>& ranks, const std::vector<std::string>& fragments) {
  std::string message = find_mismatch(ranks, 7);
  ASSERT_FALSE(message.empty()) << "no mismatch found";
  for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << message << " lacks " << f;
}

TEST(DistributedChecks, AgreeingCallsPass) {
  CollectiveDesc d = describe(Collective::AllReduce, zeros({4, 3}), ReduceOp::Avg);
  EXPECT_EQ(find_mismatch({d, d, d}, 1), "");
  // all_gather allows another dim 0.
  EXPECT_EQ(find_mismatch(
                {describe(Collective::AllGather, zeros({0, 3})), describe(Collective::AllGather, zeros({5, 3}))}, 1),
            "");
  EXPECT_EQ(describe(Collective::AllGather, zeros({5, 3})).shape(), (Shape{5, 3}));
}

TEST(DistributedChecks, EveryMismatchIsNamed) {
  CollectiveDesc base = describe(Collective::AllReduce, zeros({4, 3}));
  expect_mismatch({base, base, describe(Collective::AllReduce, zeros({4, 4}))},
                  {"all_reduce", "collective number 7", "float32 [4, 3] on rank 0 but float32 [4, 4] on rank 2"});
  expect_mismatch({base, describe(Collective::AllReduce, zeros({4, 3}, kFloat64))}, {"float64 [4, 3] on rank 1"});
  expect_mismatch({base, describe(Collective::AllReduce, zeros({4, 3}), ReduceOp::Max)},
                  {"reduce op sum on rank 0 but max on rank 1"});
  expect_mismatch({base, describe(Collective::Broadcast, zeros({4, 3}), ReduceOp::Sum, 0)},
                  {"out of order", "rank 0 called all_reduce, rank 1 called broadcast"});
  expect_mismatch({describe(Collective::Broadcast, zeros({2}), ReduceOp::Sum, 0),
                   describe(Collective::Broadcast, zeros({2}), ReduceOp::Sum, 1)},
                  {"broadcast", "root 0 on rank 0 but 1 on rank 1"});
  expect_mismatch({describe(Collective::AllGather, zeros({2, 3})), describe(Collective::AllGather, zeros({2, 4}))},
                  {"all_gather", "sizes after dim 0"});
  expect_mismatch({describe(Collective::ReduceScatter, zeros({2}), ReduceOp::Sum, -1, {zeros({2}), zeros({3})}),
                   describe(Collective::ReduceScatter, zeros({3}), ReduceOp::Sum, -1, {zeros({3}), zeros({3})})},
                  {"reduce_scatter", "list of input shapes"});
  // Shapes of more dims than a description holds are still compared (by hash).
  Shape big{1, 1, 1, 1, 1, 1, 1, 1, 2}, other{1, 1, 1, 1, 1, 1, 1, 1, 3};
  expect_mismatch({describe(Collective::AllReduce, zeros(big)), describe(Collective::AllReduce, zeros(other))},
                  {"tensor of 9 dims"});
}

TEST(DistributedChecks, DifferentDdpIterationsAreNamed) {
  CollectiveDesc at1, at2, plain = describe(Collective::AllReduce, zeros({6}), ReduceOp::Avg);
  {
    IterationScope scope(1);
    at1 = describe(Collective::AllReduce, zeros({6}), ReduceOp::Avg);
  }
  {
    IterationScope scope(2);
    at2 = describe(Collective::AllReduce, zeros({6}), ReduceOp::Avg);
  }
  EXPECT_EQ(find_mismatch({at1, at1}, 3), "");
  expect_mismatch({at1, at2, at1}, {"all_reduce", "different DistributedDataParallel iterations",
                                    "rank 0: iteration 1, rank 1: iteration 2, rank 2: iteration 1"});
  expect_mismatch({at1, plain}, {"rank 0: iteration 1, rank 1: not DDP"});
  // The scope ends: later collectives carry no iteration.
  EXPECT_EQ(find_mismatch({plain, describe(Collective::AllReduce, zeros({6}), ReduceOp::Avg)}, 3), "");
}

}  // namespace
}  // namespace tapegrad
