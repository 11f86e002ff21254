// Failures: a rank that throws (and so never joins the next collective) makes the other ranks
// fail with an error naming the collective once the timeout passes, instead of hanging. Each case
// uses its own short-timeout group, which the timeout leaves unusable; the job's group, untouched,
// then brings the ranks back into step.
#include "distributed_test.h"
#include "tapegrad/distributed/ddp.h"

namespace tapegrad {
namespace {

using testing::world;
constexpr int kFailingRank = 1;

std::shared_ptr<distributed::ProcessGroup> short_timeout_group() {
  distributed::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  return std::make_shared<distributed::ProcessGroup>(options);
}

TEST(DistributedFailure, ARankThatThrowsMakesTheOthersFailWithinTheTimeout) {
  auto group = short_timeout_group();
  Tensor t = ones({16});
  if (world().rank() == kFailingRank) {
    // This rank's step throws before it reaches the all-reduce.
    testing::expect_error([] { throw Error("simulated failure on this rank"); }, {"simulated failure"});
  } else {
    testing::expect_error([&] { group->all_reduce(t); },
                          {"ProcessGroup: all_reduce (float32 [16], sum)", "did not finish within 1500 ms",
                           "another rank may have failed"});
    // The group stays failed: later calls fail at once, naming the first failure.
    testing::expect_error([&] { group->barrier(); }, {"barrier", "can no longer be used", "all_reduce"});
  }
  world().barrier();
}

TEST(DistributedFailure, DdpBackwardFailsWhenARankThrowsInForward) {
  auto group = short_timeout_group();
  Generator gen(3);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, 8, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 2, true, &gen)});
  distributed::DistributedDataParallel ddp(model, group);
  Tensor good = ones({3, 4});
  // One healthy step first.
  ddp.forward(good).sum().backward();
  if (world().rank() == kFailingRank) {
    // A real error in this rank's forward (a batch of the wrong width): it never reaches backward.
    testing::expect_error([&] { ddp.forward(ones({3, 5})).sum().backward(); }, {"linear"});
  } else {
    testing::expect_error([&] { ddp.forward(good).sum().backward(); },
                          {"DistributedDataParallel", "all-reduce of bucket 0", "did not finish within 1500 ms"});
    testing::expect_error([&] { ddp.forward(good).sum().backward(); },
                          {"DistributedDataParallel", "can no longer be used"});
  }
  world().barrier();
}

}  // namespace
}  // namespace tapegrad
