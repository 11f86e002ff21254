// Collectives on CUDA tensors (NCCL). They need a CUDA build with NCCL and one GPU per rank on
// this machine; elsewhere they skip.
#include "distributed_test.h"

namespace tapegrad {
namespace {

using distributed::ReduceOp;
using testing::world;

bool skip_reason(std::string& why) {
  if (!distributed::is_nccl_available())
    why = "this build has no NCCL";
  else if (!cuda::is_available())
    why = "no CUDA device";
  else if (cuda::device_count() < world().local_size())
    why = "fewer GPUs than ranks on this machine";
  return !why.empty();
}

Device my_gpu() {
  return Device(DeviceKind::CUDA, world().local_rank() % cuda::device_count());
}

TEST(ProcessGroupNccl, AllReduceBroadcastGatherScatterMatchTheCpu) {
  std::string why;
  if (skip_reason(why)) GTEST_SKIP() << why;
  auto& g = world();
  const int n = g.size(), r = g.rank();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    Tensor cpu = full({1001}, double(r + 1));
    Tensor gpu = cpu.to(my_gpu());
    g.all_reduce(cpu, op);
    g.all_reduce(gpu, op);
    EXPECT_EQ(testing::values(gpu.cpu()), testing::values(cpu)) << distributed::reduce_op_name(op);
  }
  Tensor b = full({7}, double(r)).to(my_gpu());
  g.broadcast(b, n - 1);
  EXPECT_EQ(testing::values(b.cpu())[0], double(n - 1));
  std::vector<Tensor> gathered = g.all_gather(full({r + 1, 2}, double(r)).to(my_gpu()));
  ASSERT_EQ(int(gathered.size()), n);
  for (int q = 0; q < n; ++q) {
    EXPECT_EQ(gathered[size_t(q)].sizes(), (Shape{q + 1, 2}));
    EXPECT_EQ(testing::values(gathered[size_t(q)].cpu())[0], double(q));
  }
  std::vector<Tensor> pieces;
  for (int q = 0; q < n; ++q) pieces.push_back(full({q + 1}, double(r + q)).to(my_gpu()));
  Tensor out = zeros({r + 1}).to(my_gpu());
  g.reduce_scatter(out, pieces, ReduceOp::Sum);
  EXPECT_EQ(testing::values(out.cpu())[0], double(n * (n - 1) / 2 + n * r));
}

TEST(ProcessGroupNccl, SkipsOrRunsButNeverHangs) {
  // Negative control of the skip logic: a CPU collective still works in every build.
  Tensor t = ones({2});
  world().all_reduce(t);
  EXPECT_EQ(testing::values(t)[0], double(world().size()));
}

}  // namespace
}  // namespace tapegrad
