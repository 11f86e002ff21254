// ProcessGroup point to point: send/recv and isend/irecv between ranks (a ring, several tags in
// flight, interleaved with collectives, every dtype, zero sizes), and the errors: arguments refused
// up front, both sides of a mismatched pair failing alike, a peer that never answers timing out.
// Every received tensor starts as a fill that no sender sends, so a recv that moved nothing fails.
#include <chrono>
#include <thread>

#include "distributed_test.h"

namespace tapegrad {
namespace {

using testing::world;

const std::vector<DType> kAllDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

// Element i of what rank r sends with tag t: a small integer, exact in every dtype (0/1 for bool).
Tensor payload(int r, int tag, const Shape& shape, DType dtype = kFloat32) {
  int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = dtype == kBool ? double((r + tag + i) % 2) : double((r * 7 + tag * 3 + i) % 11);
  return tensor(v, {n}, kFloat64).to(dtype).reshape(shape).contiguous();
}

// A receive buffer that matches no payload: -1 everywhere (true for bool, whose payloads alternate).
Tensor unfilled(const Shape& shape, DType dtype = kFloat32) {
  return full(shape, -1.0, TensorOptions(dtype));
}

void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(testing::values(got), testing::values(want));
}

int next_rank(const distributed::ProcessGroup& g) {
  return (g.rank() + 1) % g.size();
}
int prev_rank(const distributed::ProcessGroup& g) {
  return (g.rank() + g.size() - 1) % g.size();
}

TEST(ProcessGroupP2p, RingBlocking) {
  auto& g = world();
  Tensor out = payload(g.rank(), 0, {3, 4});
  Tensor in = unfilled({3, 4});
  // A send waits for its recv, so a ring of blocking calls alternates: even ranks send first.
  if (g.rank() % 2 == 0) {
    g.send(out, next_rank(g));
    g.recv(in, prev_rank(g));
  } else {
    g.recv(in, prev_rank(g));
    g.send(out, next_rank(g));
  }
  expect_equal(in, payload(prev_rank(g), 0, {3, 4}));
  expect_equal(out, payload(g.rank(), 0, {3, 4}));  // the send left its tensor alone
}

TEST(ProcessGroupP2p, RingAsyncSmallAndLarge) {
  auto& g = world();
  // 2^18 floats is past MPI's eager limit: the payload moves by MPI's own rendezvous.
  for (Shape shape : {Shape{5}, Shape{1 << 18}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor out = payload(g.rank(), 1, shape);
    Tensor in = unfilled(shape);
    distributed::Work sent = g.isend(out, next_rank(g), 1);
    distributed::Work received = g.irecv(in, prev_rank(g), 1);
    received.wait();
    sent.wait();
    EXPECT_EQ(sent.name(), "send");
    EXPECT_EQ(received.name(), "recv");
    EXPECT_TRUE(sent.is_completed());
    expect_equal(in, payload(prev_rank(g), 1, shape));
    ASSERT_EQ(received.result().size(), 1u);
    EXPECT_TRUE(received.result()[0].is_same(in));
  }
}

TEST(ProcessGroupP2p, SeveralTagsInFlightOutOfOrder) {
  auto& g = world();
  if (g.rank() == 0) {
    std::vector<distributed::Work> works;
    for (int tag : {0, 1, 2, 7}) works.push_back(g.isend(payload(0, tag, {6}), 1, tag));
    // The same tag twice: the pairs match in call order.
    works.push_back(g.isend(payload(0, 100, {6}), 1, 9));
    works.push_back(g.isend(payload(0, 200, {6}), 1, 9));
    for (auto& w : works) w.wait();
  } else if (g.rank() == 1) {
    // The last tag first, blocking: it does not wait behind the other tags.
    Tensor seven = unfilled({6});
    g.recv(seven, 0, 7);
    expect_equal(seven, payload(0, 7, {6}));
    std::vector<Tensor> in;
    std::vector<distributed::Work> works;
    for (int tag : {2, 1, 0}) {
      in.push_back(unfilled({6}));
      works.push_back(g.irecv(in.back(), 0, tag));
    }
    Tensor first = unfilled({6}), second = unfilled({6});
    distributed::Work w1 = g.irecv(first, 0, 9), w2 = g.irecv(second, 0, 9);
    for (auto& w : works) w.wait();
    w2.wait();
    w1.wait();
    for (int k = 0; k < 3; ++k) expect_equal(in[size_t(k)], payload(0, 2 - k, {6}));
    expect_equal(first, payload(0, 100, {6}));
    expect_equal(second, payload(0, 200, {6}));
  }
  g.barrier();
}

TEST(ProcessGroupP2p, InterleavesWithAllReduce) {
  auto& g = world();
  // Rank 1's recv is in flight while every rank all-reduces, and rank 0 sends only afterwards:
  // the pending recv must not hold up the collective (nor the collective the recv).
  Tensor in = unfilled({4});
  distributed::Work received;
  if (g.rank() == 1) received = g.irecv(in, 0, 3);
  Tensor t = ones({8});
  g.all_reduce(t);
  expect_equal(t, full({8}, double(g.size())));
  if (g.rank() == 0) g.send(payload(0, 3, {4}), 1, 3);
  if (g.rank() == 1) {
    received.wait();
    expect_equal(in, payload(0, 3, {4}));
  }
  // A blocking recv while an async all-reduce runs on the same group.
  Tensor u = ones({8});
  distributed::Work reduced = g.all_reduce_async(u);
  if (g.rank() == 0) {
    reduced.wait();
    g.send(payload(0, 4, {4}), 1, 4);
  } else if (g.rank() == 1) {
    Tensor in2 = unfilled({4});
    g.recv(in2, 0, 4);
    expect_equal(in2, payload(0, 4, {4}));
  }
  reduced.wait();
  expect_equal(u, full({8}, double(g.size())));
}

TEST(ProcessGroupP2p, ZeroElements) {
  auto& g = world();
  for (Shape shape : {Shape{0}, Shape{2, 0, 3}}) {
    SCOPED_TRACE(shape_str(shape));
    if (g.rank() == 0) g.send(empty(shape), 1, 5);
    if (g.rank() == 1) {
      Tensor in = empty(shape);
      g.recv(in, 0, 5);
      EXPECT_EQ(in.sizes(), shape);
    }
  }
  g.barrier();
}

TEST(ProcessGroupP2p, EveryDType) {
  auto& g = world();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor in = unfilled({2, 5}, dtype);
    distributed::Work sent = g.isend(payload(g.rank(), 2, {2, 5}, dtype), next_rank(g), 2);
    g.recv(in, prev_rank(g), 2);
    sent.wait();
    EXPECT_EQ(in.dtype(), dtype);
    expect_equal(in, payload(prev_rank(g), 2, {2, 5}, dtype));
  }
}

TEST(ProcessGroupP2pErrors, BadArgumentsFailUpFront) {
  auto& g = world();
  Tensor t = ones({4});
  testing::expect_error([&] { g.send(t, g.rank()); }, {"send", "is this rank"});
  testing::expect_error([&] { g.irecv(t, g.rank()); }, {"recv", "is this rank"});
  testing::expect_error([&] { g.send(t, g.size()); }, {"send", "dst", "is not a rank of this group"});
  testing::expect_error([&] { g.recv(t, -1); }, {"recv", "src -1", "is not a rank of this group"});
  testing::expect_error([&] { g.send(t, next_rank(g), -1); }, {"send", "tag -1 is out of range"});
  testing::expect_error([&] { g.isend(t, next_rank(g), g.max_tag() + 1); }, {"send", "is out of range"});
  EXPECT_GE(g.max_tag(), 8190);
  Tensor strided = ones({3, 4}).transpose(0, 1);
  testing::expect_error([&] { g.recv(strided, prev_rank(g)); }, {"recv", "must be contiguous"});
  testing::expect_error([&] { g.send(Tensor(), next_rank(g)); }, {"send", "undefined"});
  // Nothing was sent: a ring afterwards pairs up as usual (the largest tag allowed, too).
  Tensor in = unfilled({4});
  distributed::Work sent = g.isend(payload(g.rank(), 0, {4}), next_rank(g), g.max_tag());
  g.recv(in, prev_rank(g), g.max_tag());
  sent.wait();
  expect_equal(in, payload(prev_rank(g), 0, {4}));
}

// Rank 0 sends `sent`, rank 1 receives into `received`: both fail with the same message.
void expect_mismatch(const Tensor& sent, const Tensor& received, const std::vector<std::string>& fragments) {
  auto& g = world();
  std::vector<std::string> all = {"send from rank 0 to rank 1 and its recv (tag 6) do not match"};
  all.insert(all.end(), fragments.begin(), fragments.end());
  if (g.rank() == 0) testing::expect_error([&] { g.send(sent, 1, 6); }, all);
  if (g.rank() == 1) {
    testing::expect_error([&] { g.recv(received, 0, 6); }, all);
    EXPECT_EQ(testing::values(received), testing::values(unfilled(received.sizes(), received.dtype())))
        << "a mismatched recv must leave its tensor alone";
  }
}

TEST(ProcessGroupP2pErrors, MismatchFailsOnBothSides) {
  auto& g = world();
  expect_mismatch(ones({4}), unfilled({4}, kFloat64),
                  {"rank 0 sends float32 [4], rank 1 receives into float64 [4]", "the dtype differs"});
  expect_mismatch(ones({2, 3}), unfilled({3, 2}), {"float32 [2, 3]", "float32 [3, 2]", "the shape differs"});
  expect_mismatch(ones({4}), unfilled({5}), {"float32 [4]", "float32 [5]", "the shape differs"});
  // Negative control: the same ranks and tag with matching tensors transfer, so the errors above
  // came from the comparison, and a mismatch leaves the pair (and the group) usable.
  if (g.rank() == 0) g.send(payload(0, 6, {2, 3}), 1, 6);
  if (g.rank() == 1) {
    Tensor in = unfilled({2, 3});
    g.recv(in, 0, 6);
    expect_equal(in, payload(0, 6, {2, 3}));
  }
  Tensor t = ones({2});
  g.all_reduce(t);
  expect_equal(t, full({2}, double(g.size())));
}

// CUDA tensors go over NCCL (test_nccl.cpp); a build without NCCL refuses them up front.
TEST(ProcessGroupP2pErrors, CudaTensorsWithoutNcclAreRefused) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (distributed::is_nccl_available()) GTEST_SKIP() << "this build has NCCL (ProcessGroupNccl covers it)";
  auto& g = world();
  Tensor t = ones({4}, TensorOptions().device(Device(DeviceKind::CUDA, 0)));
  testing::expect_error([&] { g.send(t, next_rank(g)); }, {"send", "CUDA tensors travel over NCCL", "has none"});
}

// A group of its own with a short timeout: a timeout leaves it unusable, the job's group untouched.
std::shared_ptr<distributed::ProcessGroup> short_timeout_group() {
  distributed::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  return std::make_shared<distributed::ProcessGroup>(options);
}

TEST(ProcessGroupP2pErrors, RecvWithNoSenderTimesOut) {
  auto group = short_timeout_group();
  if (world().rank() == 1) {
    Tensor in = unfilled({4});
    auto start = std::chrono::steady_clock::now();
    testing::expect_error([&] { group->recv(in, 0, 2); },
                          {"ProcessGroup: recv from rank 0 (float32 [4], tag 2) did not finish within 1000 ms",
                           "on rank 1", "no matching send came from rank 0"});
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
    // The group is unusable afterwards, naming the first failure.
    testing::expect_error([&] { group->send(ones({1}), 0); }, {"send", "can no longer be used", "recv from rank 0"});
  }
  world().barrier();
}

// Negative control for the timeouts: a sender that comes late, but within the timeout, is waited for.
TEST(ProcessGroupP2pErrors, LateSenderWithinTheTimeoutIsWaitedFor) {
  auto group = short_timeout_group();
  if (world().rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    group->send(payload(0, 2, {4}), 1, 2);
  } else if (world().rank() == 1) {
    Tensor in = unfilled({4});
    group->recv(in, 0, 2);
    expect_equal(in, payload(0, 2, {4}));
  }
  group->barrier();  // still usable
  world().barrier();
}

TEST(ProcessGroupP2pErrors, TagMismatchTimesOutOnBothSides) {
  auto group = short_timeout_group();
  if (world().rank() == 0) {
    testing::expect_error(
        [&] { group->send(ones({4}), 1, 1); },
        {"send to rank 1 (float32 [4], tag 1) did not finish within 1000 ms", "no matching recv was posted by rank 1"});
  } else if (world().rank() == 1) {
    Tensor in = unfilled({4});
    testing::expect_error([&] { group->recv(in, 0, 2); },
                          {"recv from rank 0 (float32 [4], tag 2) did not finish within 1000 ms",
                           "rank 0 did send a tensor with tag 1 that no recv took"});
  }
  world().barrier();
}

}  // namespace
}  // namespace tapegrad
