// ProcessGroup collectives over MPI: values for every op and dtype, uneven and zero sizes, async
// handles, and clear errors for calls the ranks disagree on. Every value is a small integer (or a
// sum of them divided by the rank count), exact in every dtype except where a tolerance is given.
#include <cmath>

#include "distributed_test.h"

namespace tapegrad {
namespace {

using distributed::ReduceOp;
using testing::world;

const std::vector<DType> kAllDTypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

// Element i of rank r's tensor: an integer in [-2, 2] (0/1 for bool).
double value(int r, int64_t i, DType dtype) {
  if (dtype == kBool) return (r + i) % 3 == 0 ? 1 : 0;
  return double((r * 3 + i) % 5) - 2;
}

Tensor rank_tensor(int r, const Shape& shape, DType dtype) {
  int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(r, i, dtype);
  return tensor(v, {n}, kFloat64).to(dtype).reshape(shape).contiguous();
}

double reduce_expected(ReduceOp op, int64_t i, DType dtype, int size) {
  double acc = value(0, i, dtype);
  for (int r = 1; r < size; ++r) {
    double v = value(r, i, dtype);
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc = dtype == kBool ? std::max(acc, v) : acc + v;
    if (op == ReduceOp::Max) acc = std::max(acc, v);
    if (op == ReduceOp::Min) acc = std::min(acc, v);
  }
  return op == ReduceOp::Avg ? acc / size : acc;
}

// Avg divides by the rank count: exact for sums, rounded to the dtype for averages.
double tolerance(DType dtype) {
  return dtype == kFloat16 ? 2e-3 : dtype == kBFloat16 ? 1e-2 : dtype == kFloat32 ? 1e-6 : 1e-12;
}

TEST(ProcessGroup, RankAndSizeComeFromTheLauncher) {
  auto& g = world();
  EXPECT_GE(g.size(), 2) << "run under mpirun -np 2 or more";
  EXPECT_GE(g.rank(), 0);
  EXPECT_LT(g.rank(), g.size());
  // One machine: every rank is local.
  EXPECT_EQ(g.local_size(), g.size());
  EXPECT_EQ(g.local_rank(), g.rank());
  // Each rank's rank, gathered: 0, 1, ..., size - 1 (a negative control for a group that lies).
  std::vector<Tensor> ranks = g.all_gather(tensor(std::vector<int64_t>{g.rank()}, {1}));
  ASSERT_EQ(int(ranks.size()), g.size());
  for (int r = 0; r < g.size(); ++r) EXPECT_EQ(ranks[size_t(r)].item<int64_t>(), r);
}

TEST(ProcessGroup, AllReduceEveryOpAndDType) {
  auto& g = world();
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Avg && !is_floating_point(dtype)) continue;  // an error, tested below
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + distributed::reduce_op_name(op));
      Tensor t = rank_tensor(g.rank(), {7}, dtype);  // 7: no multiple of any rank count
      g.all_reduce(t, op);
      EXPECT_EQ(t.dtype(), dtype);
      std::vector<double> got = testing::values(t);
      for (int64_t i = 0; i < 7; ++i)
        EXPECT_NEAR(got[size_t(i)], reduce_expected(op, i, dtype, g.size()), tolerance(dtype)) << "element " << i;
    }
  }
}

TEST(ProcessGroup, AllReduceUnevenAndZeroSizes) {
  auto& g = world();
  for (Shape shape : {Shape{0}, Shape{1}, Shape{3, 5, 7}, Shape{100003}, Shape{2, 0, 3}, Shape{}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor t = rank_tensor(g.rank(), shape, kFloat32);
    g.all_reduce(t, ReduceOp::Sum);
    ASSERT_EQ(t.sizes(), shape);
    std::vector<double> got = testing::values(t);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], reduce_expected(ReduceOp::Sum, int64_t(i), kFloat32, g.size())) << "element " << i;
  }
}

TEST(ProcessGroup, BroadcastFromEveryRoot) {
  auto& g = world();
  for (DType dtype : kAllDTypes) {
    for (int root = 0; root < g.size(); ++root) {
      Tensor t = rank_tensor(g.rank(), {2, 5}, dtype);
      g.broadcast(t, root);
      EXPECT_EQ(testing::values(t), testing::values(rank_tensor(root, {2, 5}, dtype)))
          << dtype_name(dtype) << " from root " << root;
    }
  }
  Tensor empty_tensor = zeros({0});
  g.broadcast(empty_tensor, g.size() - 1);
  EXPECT_EQ(empty_tensor.numel(), 0);
}

TEST(ProcessGroup, AllGatherUnevenSizes) {
  auto& g = world();
  for (DType dtype : {kFloat32, kFloat16, kInt64, kBool}) {
    // Rank r sends r rows of 3 (rank 0 sends none).
    Tensor mine = rank_tensor(g.rank() + 10, {g.rank(), 3}, dtype);
    std::vector<Tensor> all = g.all_gather(mine);
    ASSERT_EQ(int(all.size()), g.size());
    for (int r = 0; r < g.size(); ++r) {
      EXPECT_EQ(all[size_t(r)].sizes(), (Shape{r, 3}));
      EXPECT_EQ(all[size_t(r)].dtype(), dtype);
      EXPECT_EQ(testing::values(all[size_t(r)]), testing::values(rank_tensor(r + 10, {r, 3}, dtype)))
          << dtype_name(dtype) << " from rank " << r;
    }
  }
}

TEST(ProcessGroup, ReduceScatterUnevenPieces) {
  auto& g = world();
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kInt32}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      // Piece p has p + 1 elements (piece 0 of rank r starts at offset 0 of rank_tensor(r, ...)).
      std::vector<Tensor> pieces;
      int64_t offset = 0;
      std::vector<int64_t> offsets;
      Tensor flat = rank_tensor(g.rank(), {int64_t(g.size() * (g.size() + 1) / 2)}, dtype);
      for (int p = 0; p < g.size(); ++p) {
        offsets.push_back(offset);
        pieces.push_back(flat.narrow(0, offset, p + 1).contiguous());
        offset += p + 1;
      }
      Tensor out = zeros({g.rank() + 1}, dtype);
      g.reduce_scatter(out, pieces, op);
      std::vector<double> got = testing::values(out);
      for (int64_t i = 0; i <= g.rank(); ++i)
        EXPECT_NEAR(got[size_t(i)], reduce_expected(op, offsets[size_t(g.rank())] + i, dtype, g.size()),
                    tolerance(dtype))
            << dtype_name(dtype) << " " << distributed::reduce_op_name(op) << " element " << i;
    }
  }
}

TEST(ProcessGroup, AsyncWorksCompleteInAnyWaitOrder) {
  auto& g = world();
  std::vector<Tensor> tensors;
  std::vector<distributed::Work> works;
  for (int k = 0; k < 5; ++k) {
    tensors.push_back(full({64}, double(g.rank() + k)));
    works.push_back(g.all_reduce_async(tensors.back(), ReduceOp::Sum));
  }
  distributed::Work gather = g.all_gather_async(full({2}, double(g.rank())));
  distributed::Work barrier = g.barrier_async();
  for (int k = 4; k >= 0; --k) {
    works[size_t(k)].wait();
    EXPECT_TRUE(works[size_t(k)].is_completed());
    double expected = double(g.size() * (g.size() - 1) / 2 + g.size() * k);
    EXPECT_EQ(testing::values(tensors[size_t(k)])[0], expected);
    EXPECT_TRUE(works[size_t(k)].result()[0].is_same(tensors[size_t(k)]));
    EXPECT_EQ(works[size_t(k)].name(), "all_reduce");
    EXPECT_LE(works[size_t(k)].start_time(), works[size_t(k)].end_time());
  }
  std::vector<Tensor> gathered = gather.result();
  ASSERT_EQ(int(gathered.size()), g.size());
  for (int r = 0; r < g.size(); ++r) EXPECT_EQ(testing::values(gathered[size_t(r)])[1], double(r));
  barrier.wait();
  g.barrier();
}

TEST(ProcessGroupErrors, MismatchedShapesAcrossRanksFailOnEveryRank) {
  auto& g = world();
  // Rank 1 passes 5 elements where the others pass 4: every rank gets the same clear error.
  Tensor t = zeros({g.rank() == 1 ? 5 : 4});
  testing::expect_error([&] { g.all_reduce(t); }, {"all_reduce", "float32 [4] on rank 0 but float32 [5] on rank 1"});
  Tensor d = zeros({4}, g.rank() == 1 ? kFloat64 : kFloat32);
  testing::expect_error([&] { g.broadcast(d, 0); }, {"broadcast", "float32 [4] on rank 0 but float64 [4] on rank 1"});
  testing::expect_error([&] { g.all_reduce(zeros({3}), g.rank() == 1 ? ReduceOp::Max : ReduceOp::Sum); },
                        {"all_reduce", "reduce op sum on rank 0 but max on rank 1"});
  testing::expect_error([&] { g.broadcast(zeros({3}), g.rank() == 1 ? 1 : 0); },
                        {"broadcast", "root 0 on rank 0 but 1 on rank 1"});
  testing::expect_error(
      [&] {
        g.all_gather(zeros({2, g.rank() == 1 ? 4 : 3}));
      },
      {"all_gather", "same sizes after dim 0"});
  testing::expect_error(
      [&] {
        if (g.rank() == 1) {
          g.broadcast(zeros({3}), 0);
        } else {
          g.all_reduce(zeros({3}));
        }
      },
      {"collectives called out of order", "rank 0 called all_reduce, rank 1 called broadcast"});
  // The group is still usable: the mismatch was caught before any data moved.
  Tensor ok = ones({4});
  g.all_reduce(ok);
  EXPECT_EQ(testing::values(ok)[0], double(g.size()));
}

TEST(ProcessGroupErrors, BadArgumentsAreLocalErrors) {
  auto& g = world();
  testing::expect_error([&] { g.all_reduce(Tensor()); }, {"all_reduce", "undefined"});
  testing::expect_error([&] { g.all_reduce(zeros({3, 4}).t()); }, {"all_reduce", "contiguous"});
  testing::expect_error([&] { g.all_reduce(zeros({3}, kInt64), ReduceOp::Avg); },
                        {"all_reduce", "Avg needs a floating-point tensor", "int64"});
  testing::expect_error([&] { g.broadcast(zeros({3}), g.size()); }, {"broadcast", "root", "not a rank"});
  testing::expect_error([&] { g.reduce_scatter(zeros({1}), {zeros({1})}); }, {"reduce_scatter", "one input per rank"});
  std::vector<Tensor> pieces(size_t(g.size()), zeros({2}));
  testing::expect_error([&] { g.reduce_scatter(zeros({3}), pieces); }, {"reduce_scatter", "[3]", "[2]"});
  testing::expect_error([&] { distributed::Work().wait(); }, {"Work", "no collective"});
  // Negative control: the same calls with good arguments pass, and the ranks are still in step.
  g.reduce_scatter(zeros({2}), pieces);
  g.barrier();
}

TEST(ProcessGroupErrors, CollectiveCheckCanBeTurnedOff) {
  auto& g = world();
  distributed::ProcessGroupOptions options;
  options.check_collectives = false;
  options.timeout = std::chrono::seconds(20);
  distributed::ProcessGroup unchecked(options);
  Tensor t = full({3}, 1.0);
  unchecked.all_reduce(t);
  EXPECT_EQ(testing::values(t)[2], double(g.size()));
  EXPECT_EQ(int(unchecked.all_gather(zeros({g.rank()})).size()), g.size());  // all_gather still exchanges shapes
}

TEST(ProcessGroupErrors, BadTimeoutsNameTheVariableAndTheValue) {
  // Rejected before any collective, so each rank fails alike and on its own.
  const char* saved = std::getenv("TAPEGRAD_DISTRIBUTED_TIMEOUT");
  std::string previous = saved ? saved : "";
  for (const char* bad : {"nan", "-5", "0", "abc", "", "5s", "-inf"}) {
    SCOPED_TRACE(bad);
    setenv("TAPEGRAD_DISTRIBUTED_TIMEOUT", bad, 1);
    testing::expect_error([] { distributed::ProcessGroup group; },
                          {"TAPEGRAD_DISTRIBUTED_TIMEOUT", std::string("got '") + bad + "'"});
  }
  if (saved)
    setenv("TAPEGRAD_DISTRIBUTED_TIMEOUT", previous.c_str(), 1);
  else
    unsetenv("TAPEGRAD_DISTRIBUTED_TIMEOUT");
  distributed::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(-1);
  testing::expect_error([&] { distributed::ProcessGroup group(options); }, {"ProcessGroupOptions::timeout", "-1 ms"});
  world().barrier();
}

}  // namespace
}  // namespace tapegrad
