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

// Point to point on GPUs: a ring by rank parity (even ranks send first), isend/irecv of every
// float dtype against what the CPU path moves, a zero-element tensor, a GPU pipeline's two
// directions, and a shape mismatch failing on both sides before anything is queued.
TEST(ProcessGroupNccl, SendRecvMatchTheCpuPath) {
  std::string why;
  if (skip_reason(why)) GTEST_SKIP() << why;
  auto& g = world();
  const int n = g.size(), r = g.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor mine = (arange(0, 2000, 1, kFloat32) + double(1000 * r)).to(my_gpu());
  Tensor got = zeros({2000}).to(my_gpu());
  if (r % 2 == 0) {
    g.send(mine, next, 3);
    g.recv(got, prev, 3);
  } else {
    g.recv(got, prev, 3);
    g.send(mine, next, 3);
  }
  EXPECT_EQ(testing::values(got.cpu()), testing::values(arange(0, 2000, 1, kFloat32) + double(1000 * prev)));
  for (DType dtype : {kFloat64, kFloat16, kBFloat16, kInt64}) {
    Tensor out = full({3, 5}, double(r + 1), dtype).to(my_gpu()), in = zeros({3, 5}, dtype).to(my_gpu());
    // One direction per pair of neighbours (0 -> 1, 2 -> 3, ...), a GPU pipeline's activations.
    if (r % 2 == 0 && next != 0) {
      distributed::Work w = g.isend(out, next, 4);
      w.wait();
    } else if (r % 2 == 1) {
      g.irecv(in, prev, 4).wait();
      EXPECT_EQ(testing::values(in.cpu())[0], double(prev + 1)) << dtype_name(dtype);
    }
  }
  Tensor empty_out = zeros({0}).to(my_gpu());
  if (r == 0) g.send(empty_out, 1, 5);
  if (r == 1) g.recv(empty_out, 0, 5);
  // A shape mismatch: the same Error on both sides, and the pair is used up.
  if (r < 2) {
    Tensor t = zeros({r == 0 ? 4 : 5}).to(my_gpu());
    testing::expect_error([&] { r == 0 ? g.send(t, 1, 6) : g.recv(t, 0, 6); },
                          {"send from rank 0 to rank 1", "do not match", "float32 [4] on a GPU", "[5]"});
  }
  g.barrier();
}

TEST(ProcessGroupNccl, SkipsOrRunsButNeverHangs) {
  // Negative control of the skip logic: a CPU collective still works in every build.
  Tensor t = ones({2});
  world().all_reduce(t);
  EXPECT_EQ(testing::values(t)[0], double(world().size()));
}

}  // namespace
}  // namespace tapegrad
