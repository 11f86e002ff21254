// DistributedDataParallel against one process training on the whole batch.
//
// Tolerance: the models run in float64. A rank's gradient is a sum over its b rows, then an
// average over N ranks; the reference sums N*b rows in one GEMM. The two orders differ by a few
// ulps (~1e-16 relative) per gradient, and K Adam steps (normalised updates of size ~lr) carry
// that over to the weights without growing it beyond ~1e-14 unless a gradient is within rounding
// of zero; 1e-10 leaves room for that and still catches any real error (a missing average is
// off by a factor N, a missed gradient by ~lr).
#include <atomic>
#include <cmath>
#include <thread>

#include "distributed_test.h"
#include "tapegrad/distributed/ddp.h"

namespace tapegrad {
namespace {

using distributed::DDPOptions;
using distributed::DistributedDataParallel;
using testing::world;
using testing::world_ptr;

constexpr double kTol = 1e-10;
constexpr int64_t kBatch = 3;  // rows per rank

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t hidden = 16) {
  Generator gen(seed);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(6, hidden, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, 4, true, &gen)});
  model->to(kFloat64);
  return model;
}

// The data of one step: rows [0, rows) of inputs and class targets, the same on every rank.
Example batch(int64_t step, int64_t rows) {
  Generator gen(1000 + uint64_t(step));
  return {randn({rows, 6}, kFloat64, &gen), randint(0, 4, {rows}, kInt64, &gen)};
}

Example rows(const Example& e, int64_t start, int64_t count) {
  return {e.input.narrow(0, start, count).contiguous(), e.target.narrow(0, start, count).contiguous()};
}

void expect_same_weights(nn::Module& a, nn::Module& b, double tol) {
  StateDict x = a.named_parameters(), y = b.named_parameters();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> u = testing::values(x[i].second), v = testing::values(y[i].second);
    ASSERT_EQ(u.size(), v.size());
    double worst = 0;
    for (size_t k = 0; k < u.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
    EXPECT_LE(worst, tol) << x[i].first;
  }
}

// One process, the whole batch of every rank.
void train_reference(nn::Sequential& model, int steps, int64_t rows_per_step) {
  optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < steps; ++s) {
    Example e = batch(s, rows_per_step);
    cross_entropy(model.forward(e.input), e.target).backward();
    opt.step();
    opt.zero_grad();
  }
}

TEST(DistributedDDP, ConstructionBroadcastsRankZerosWeights) {
  auto model = make_mlp(10 + uint64_t(world().rank()));  // every rank starts differently
  DistributedDataParallel ddp(model, world_ptr());
  auto rank0 = make_mlp(10);
  expect_same_weights(*model, *rank0, 0.0);
  // Negative control: a model of another seed differs.
  auto other = make_mlp(11);
  EXPECT_NE(testing::values(other->parameters()[0]), testing::values(model->parameters()[0]));
}

TEST(DistributedDDP, MlpMatchesOneProcessOnTheConcatenatedBatch) {
  const int n = world().size(), r = world().rank();
  const int steps = 5;
  auto model = make_mlp(10 + uint64_t(r));
  DistributedDataParallel ddp(model, world_ptr());
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < steps; ++s) {
    Example mine = rows(batch(s, n * kBatch), r * kBatch, kBatch);
    cross_entropy(ddp.forward(mine.input), mine.target).backward();
    opt.step();
    opt.zero_grad();
  }
  auto reference = make_mlp(10);
  train_reference(*reference, steps, n * kBatch);
  expect_same_weights(*model, *reference, kTol);
  // Negative control: without the reduction (plain local training) the weights differ.
  auto local = make_mlp(10);
  {
    optim::Adam lopt(local->parameters(), optim::AdamOptions(1e-2));
    for (int s = 0; s < steps; ++s) {
      Example mine = rows(batch(s, n * kBatch), r * kBatch, kBatch);
      cross_entropy(local->forward(mine.input), mine.target).backward();
      lopt.step();
      lopt.zero_grad();
    }
  }
  double diff = 0;
  std::vector<double> a = testing::values(local->parameters()[0]), b = testing::values(reference->parameters()[0]);
  for (size_t k = 0; k < a.size(); ++k) diff = std::max(diff, std::abs(a[k] - b[k]));
  EXPECT_GT(diff, 1e-4);
}

TEST(DistributedDDP, NoSyncAccumulationMatchesOneProcess) {
  const int n = world().size(), r = world().rank();
  const int steps = 3, micro = 2;
  auto model = make_mlp(10 + uint64_t(r));
  DistributedDataParallel ddp(model, world_ptr());
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < steps; ++s) {
    Example all = batch(s, micro * n * kBatch);
    for (int m = 0; m < micro; ++m) {
      Example mine = rows(all, (m * n + r) * kBatch, kBatch);
      auto run = [&] { (cross_entropy(ddp.forward(mine.input), mine.target) * (1.0 / micro)).backward(); };
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        run();
        // Accumulated locally only: this rank's gradient differs from the others'.
      } else {
        run();
      }
    }
    opt.step();
    opt.zero_grad();
  }
  auto reference = make_mlp(10);
  train_reference(*reference, steps, micro * n * kBatch);
  expect_same_weights(*model, *reference, kTol);
}

TEST(DistributedDDP, BucketSizeDoesNotChangeResults) {
  const int n = world().size(), r = world().rank();
  auto train = [&](double cap_mb, std::vector<std::vector<std::string>>& layout) {
    auto model = make_mlp(10 + uint64_t(r));
    DistributedDataParallel ddp(model, world_ptr(), DDPOptions().bucket_cap_mb(cap_mb));
    layout = ddp.bucket_parameter_names();
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
    for (int s = 0; s < 3; ++s) {
      Example mine = rows(batch(s, n * kBatch), r * kBatch, kBatch);
      cross_entropy(ddp.forward(mine.input), mine.target).backward();
      opt.step();
      opt.zero_grad();
    }
    return model;
  };
  std::vector<std::vector<std::string>> small_layout, large_layout;
  auto small = train(1e-6, small_layout);  // every parameter its own bucket
  auto large = train(25, large_layout);
  // The layouts really differ (else the comparison below would be vacuous), in reverse
  // registration order.
  using Names = std::vector<std::vector<std::string>>;
  EXPECT_EQ(small_layout, (Names{{"2.bias"}, {"2.weight"}, {"0.bias"}, {"0.weight"}}));
  EXPECT_EQ(large_layout, (Names{{"2.bias", "2.weight", "0.bias", "0.weight"}}));
  // An element's average is the same sum whatever bucket carries it; MPI may pick another
  // reduction algorithm for another message size, so allow summation-order rounding.
  expect_same_weights(*small, *large, 1e-12);
}

TEST(DistributedDDP, AllReducesStartBeforeBackwardEnds) {
  // float32 and wide layers: the first layer's backward is long, so there is time to overlap.
  const int r = world().rank();
  auto run = [&](double cap_mb) {
    Generator gen(5);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(1024, 512, true, &gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(512, 512, true, &gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(512, 10, true, &gen)});
    // Registered before DDP's own hooks, so each records when its gradient arrived, before DDP acts.
    std::atomic<int64_t> last_grad{0};
    std::vector<autograd::RemovableHandle> handles;
    for (const Tensor& p : model->parameters())
      handles.push_back(autograd::register_post_accumulate_grad_hook(
          p, [&](const Tensor&) { last_grad = std::chrono::steady_clock::now().time_since_epoch().count(); }));
    DistributedDataParallel ddp(model, world_ptr(), DDPOptions().bucket_cap_mb(cap_mb));
    Generator data(77 + uint64_t(r));
    Tensor x = randn({512, 1024}, kFloat32, &data);
    Tensor y = randint(0, 10, {512}, kInt64, &data);
    cross_entropy(ddp.forward(x), y).backward();
    auto timings = ddp.last_bucket_timings();
    EXPECT_EQ(timings.size(), ddp.bucket_parameter_names().size());
    return std::make_pair(timings.front(),
                          std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_grad.load())));
  };
  // One bucket per parameter: the last layer's bucket is queued, and its all-reduce starts, while
  // backward is still computing the earlier layers' gradients.
  auto [first, last_grad] = run(1e-6);
  EXPECT_LT(first.ready, last_grad) << "the first bucket was only queued after the last gradient";
  EXPECT_LT(first.started, last_grad) << "the first all-reduce only began after the last gradient";
  EXPECT_LE(first.started, first.finished);
  // Negative control: one bucket for everything cannot start before the last gradient.
  auto [only, last_grad_one] = run(1000);
  EXPECT_GE(only.ready, last_grad_one);
  EXPECT_GE(only.started, last_grad_one);
}

TEST(DistributedDDP, TiedParametersAreReducedOnce) {
  const int n = world().size(), r = world().rank();
  auto make = [](uint64_t seed) {
    Generator gen(seed);
    auto shared = std::make_shared<nn::Linear>(6, 6, true, &gen);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        shared, std::make_shared<nn::ReLU>(), shared, std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(6, 4, true, &gen)});
    model->to(kFloat64);
    return model;
  };
  auto model = make(20 + uint64_t(r));
  DistributedDataParallel ddp(model, world_ptr());
  EXPECT_EQ(ddp.bucket_parameter_names(),
            (std::vector<std::vector<std::string>>{{"4.bias", "4.weight", "0.bias", "0.weight"}}));
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  auto reference = make(20);
  optim::Adam ropt(reference->parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < 3; ++s) {
    Example all = batch(s, n * kBatch);
    Example mine = rows(all, r * kBatch, kBatch);
    cross_entropy(ddp.forward(mine.input), mine.target).backward();
    opt.step();
    opt.zero_grad();
    cross_entropy(reference->forward(all.input), all.target).backward();
    ropt.step();
    ropt.zero_grad();
  }
  expect_same_weights(*model, *reference, kTol);
}

// a and b feed the output (b only when use_b); c never does.
class Branchy : public nn::Module {
 public:
  explicit Branchy(uint64_t seed) {
    Generator gen(seed);
    c = register_module("c", std::make_shared<nn::Linear>(6, 4, true, &gen));
    a = register_module("a", std::make_shared<nn::Linear>(6, 4, true, &gen));
    b = register_module("b", std::make_shared<nn::Linear>(6, 4, true, &gen));
    to(kFloat64);
  }
  std::string name() const override { return "Branchy"; }
  Tensor forward(const Tensor& x, bool use_b) { return use_b ? a->forward(x) + b->forward(x) : a->forward(x); }
  std::shared_ptr<nn::Linear> a, b, c;
};

TEST(DistributedDDP, UnusedParametersWithFindUnused) {
  const int n = world().size(), r = world().rank();
  auto model = std::make_shared<Branchy>(30 + uint64_t(r));
  DistributedDataParallel ddp(model, world_ptr(), DDPOptions().find_unused_parameters(true));
  auto reference = std::make_shared<Branchy>(30);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  optim::Adam ropt(reference->parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < 3; ++s) {
    Example all = batch(s, n * kBatch);
    Example mine = rows(all, r * kBatch, kBatch);
    Tensor loss = cross_entropy(model->forward(mine.input, r == 0), mine.target);  // only rank 0 uses b
    ddp.prepare_for_backward({loss});
    loss.backward();
    // b: used by rank 0 only, so every rank gets the average (rank 0's gradient / n); c: by no rank.
    EXPECT_TRUE(model->b->weight.grad().defined());
    EXPECT_FALSE(model->c->weight.grad().defined());
    Tensor ref_loss;
    for (int q = 0; q < n; ++q) {
      Example part = rows(all, q * kBatch, kBatch);
      Tensor l = cross_entropy(reference->forward(part.input, q == 0), part.target) * (1.0 / n);
      ref_loss = ref_loss.defined() ? ref_loss + l : l;
    }
    ref_loss.backward();
    for (auto [mine_p, ref_p] :
         {std::make_pair(model->a->weight, reference->a->weight), std::make_pair(model->b->bias, reference->b->bias)}) {
      std::vector<double> u = testing::values(mine_p.grad()), v = testing::values(ref_p.grad());
      for (size_t k = 0; k < u.size(); ++k) EXPECT_NEAR(u[k], v[k], 1e-12);
    }
    opt.step();
    opt.zero_grad();
    ropt.step();
    ropt.zero_grad();
  }
  expect_same_weights(*model, *reference, kTol);
}

TEST(DistributedDDP, UnusedParameterWithoutFindUnusedIsAClearError) {
  const int r = world().rank();
  auto model = std::make_shared<Branchy>(30);
  DistributedDataParallel ddp(model, world_ptr());
  Example mine = rows(batch(0, 3 * kBatch), r * kBatch, kBatch);
  auto step = [&] {
    Tensor loss = cross_entropy(model->forward(mine.input, true), mine.target);
    ddp.prepare_for_backward({loss});
    loss.backward();
  };
  step();  // c gets no gradient: its bucket never completes (the same on every rank)
  testing::expect_error(step,
                        {"DistributedDataParallel", "no gradient for c.weight, c.bias", "find_unused_parameters"});
}

TEST(DistributedDDP, ARankThatSkipsABackwardFailsOnEveryRank) {
  // Rank 1 runs the second iteration's forward but not its backward: its next reduction would pair
  // with the other ranks' second, average the wrong gradients and finish as if fine. Every rank
  // must fail instead, naming the ranks and their iterations, and none may hang.
  const int r = world().rank();
  auto model = make_mlp(5);
  DistributedDataParallel ddp(model, world_ptr());
  Example mine = rows(batch(0, 3 * kBatch), r * kBatch, kBatch);
  auto step = [&] { cross_entropy(ddp.forward(mine.input), mine.target).backward(); };
  step();  // iteration 0, in step everywhere
  if (r == 1) {
    ddp.forward(mine.input);  // iteration 1: no backward on this rank
    testing::expect_error(step, {"DistributedDataParallel", "different DistributedDataParallel iterations",
                                 "rank 0: iteration 1", "rank 1: iteration 2"});
  } else {
    testing::expect_error(step, {"DistributedDataParallel", "different DistributedDataParallel iterations",
                                 "rank 0: iteration 1", "rank 1: iteration 2"});
  }
  world().barrier();
}

TEST(DistributedDDP, ClipGradNormAfterTheReductionMatchesOneProcess) {
  const int n = world().size(), r = world().rank();
  auto clip = [](nn::Module& m, double max_norm) {
    double total = 0;
    for (const Tensor& p : m.parameters()) total += (p.grad() * p.grad()).sum().item();
    double norm = std::sqrt(total), scale = max_norm / (norm + 1e-6);
    if (scale < 1)
      for (const Tensor& p : m.parameters()) p.grad().mul_(scale);
    return norm;
  };
  auto model = make_mlp(10 + uint64_t(r));
  DistributedDataParallel ddp(model, world_ptr());
  Example all = batch(0, n * kBatch);
  Example mine = rows(all, r * kBatch, kBatch);
  cross_entropy(ddp.forward(mine.input), mine.target).backward();
  // After backward every rank holds the same gradients, so the same norm and the same clipping.
  for (const Tensor& p : model->parameters()) {
    std::vector<Tensor> everyone = world().all_gather(p.grad());
    for (int q = 1; q < n; ++q) EXPECT_EQ(testing::values(everyone[size_t(q)]), testing::values(everyone[0]));
  }
  double norm = clip(*model, 0.05);
  auto reference = make_mlp(10);
  cross_entropy(reference->forward(all.input), all.target).backward();
  double ref_norm = clip(*reference, 0.05);
  EXPECT_NEAR(norm, ref_norm, 1e-12);
  EXPECT_GT(ref_norm, 0.05) << "the clip must act, else this checks nothing";
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    std::vector<double> u = testing::values(model->parameters()[i].grad());
    std::vector<double> v = testing::values(reference->parameters()[i].grad());
    for (size_t k = 0; k < u.size(); ++k) EXPECT_NEAR(u[k], v[k], 1e-12);
  }
}

TEST(DistributedDDP, MismatchedModelsAreAnErrorOnEveryRankAtConstruction) {
  const int r = world().rank();
  testing::expect_error(
      [&] { DistributedDataParallel ddp(make_mlp(10, r == 1 ? 17 : 16), world_ptr()); },
      {"DistributedDataParallel", "parameter 0.weight", "float64 [16, 6] on rank 0", "float64 [17, 6] on rank 1"});
  testing::expect_error(
      [&] {
        std::shared_ptr<nn::Module> m = make_mlp(10);
        if (r == 1) m = std::make_shared<Branchy>(1);
        DistributedDataParallel ddp(m, world_ptr());
      },
      {"DistributedDataParallel", "rank 0 has 4 parameters", "rank 1 has 6"});
  testing::expect_error([&] { DistributedDataParallel ddp(make_mlp(10), world_ptr(), DDPOptions().bucket_cap_mb(0)); },
                        {"DistributedDataParallel", "bucket_cap_mb"});
  // Negative control: the same models everywhere construct fine, and the group is still in step.
  DistributedDataParallel ok(make_mlp(10), world_ptr());
  world().barrier();
}

TEST(DistributedDDP, ForwardNeedsAUnaryModule) {
  DistributedDataParallel ddp(std::make_shared<Branchy>(3), world_ptr());
  testing::expect_error(
      [&] {
        ddp.forward(zeros({1, 6}, kFloat64));
      },
      {"DistributedDataParallel::forward", "Branchy", "prepare_for_backward"});
}

}  // namespace
}  // namespace tapegrad
