// ZeroRedundancyOptimizer against a plain optimiser in one process.
//
// Tolerance: none. Every rank computes the same gradients (the same data, the whole batch), and a
// parameter's update is the same code whichever optimiser runs it (the CPU's multi-tensor and
// per-parameter updates are bit-identical), so the replicas must equal the reference bit for bit.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <limits>

#include "distributed_test.h"
#include "tapegrad/distributed/zero.h"

namespace tapegrad {
namespace {

using distributed::OptimizerFactory;
using distributed::ZeroRedundancyOptimizer;
using testing::world;
using testing::world_ptr;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t in = 6, int64_t hidden = 16, int64_t out = 4) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(in, hidden, true, &gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, out, true, &gen)});
}

Example batch(int64_t step, int64_t in = 6, int64_t classes = 4) {
  Generator gen(1000 + uint64_t(step));
  return {randn({8, in}, kFloat32, &gen), randint(0, classes, {8}, kInt64, &gen)};
}

OptimizerFactory adam(double lr = 1e-2) {
  return [lr](std::vector<optim::ParamGroup> groups) {
    return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions(lr));
  };
}

// One training step's gradients, the same on every rank.
void backward(nn::Sequential& model, int64_t step) {
  Example e = batch(step);
  cross_entropy(model.forward(e.input), e.target).backward();
}

// `steps` training steps of the sharded optimiser and a plain one in lockstep, each on its own
// copy of the model, with the same gradients; `after_step` runs after each (a scheduler's step).
void train_in_lockstep(
    nn::Sequential& model, nn::Sequential& reference, optim::Optimizer& sharded, optim::Optimizer& plain, int steps,
    const std::function<void()>& after_step = [] {}) {
  for (int s = 0; s < steps; ++s) {
    backward(model, s);
    backward(reference, s);
    sharded.step();
    plain.step();
    sharded.zero_grad();
    plain.zero_grad();
    after_step();
  }
}

void expect_bit_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(testing::values(a[i]), testing::values(b[i])) << "parameter " << i;
}

// Every parameter, flattened into one float64 vector, from every rank.
std::vector<std::vector<double>> params_of_every_rank(const std::vector<Tensor>& params) {
  std::vector<double> mine;
  for (const Tensor& p : params)
    for (double v : testing::values(p)) mine.push_back(v);
  std::vector<std::vector<double>> all;
  for (const Tensor& t : world().all_gather(tensor<double>(mine, {int64_t(mine.size())})))
    all.push_back(testing::values(t));
  return all;
}

std::vector<double> gather_doubles(double mine) {
  std::vector<double> all;
  for (const Tensor& t : world().all_gather(tensor<double>({mine}, {1}))) all.push_back(t.item());
  return all;
}

void expect_same_state(const StateDict& got, const StateDict& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.dtype(), want[i].second.dtype()) << want[i].first;
    EXPECT_EQ(got[i].second.sizes(), want[i].second.sizes()) << want[i].first;
    EXPECT_EQ(testing::values(got[i].second), testing::values(want[i].second)) << want[i].first;
  }
}

TEST(ZeroRedundancy, MlpAdamWithSchedulerMatchesOneProcessBitForBit) {
  auto model = make_mlp(7), reference = make_mlp(7);
  ZeroRedundancyOptimizer opt(model->parameters(), world_ptr(), adam());
  optim::Adam plain(reference->parameters(), optim::AdamOptions(1e-2));
  // The scheduler sets the full groups' lr; each step hands it to the local optimiser.
  optim::StepLR sched(opt, 2, 0.5), plain_sched(plain, 2, 0.5);
  train_in_lockstep(*model, *reference, opt, plain, 6, [&] {
    sched.step();
    plain_sched.step();
  });
  EXPECT_EQ(opt.lr(), plain.lr());
  if (opt.local_optimizer() != nullptr) EXPECT_EQ(opt.local_optimizer()->lr(), plain.lr() * 2);  // synced at step
  expect_bit_identical(model->parameters(), reference->parameters());
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  // Every rank computed the same partition.
  std::vector<double> owners;
  for (size_t i = 0; i < opt.params().size(); ++i) owners.push_back(opt.rank_of(i));
  std::vector<std::vector<double>> all;
  for (const Tensor& t : world().all_gather(tensor<double>(owners, {int64_t(owners.size())})))
    all.push_back(testing::values(t));
  for (const auto& o : all) EXPECT_EQ(o, owners);
}

TEST(ZeroRedundancy, ParamGroupsWithSgdAndAdamWMatchOneProcess) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
  const std::vector<Make> makers = {
      [](std::vector<optim::ParamGroup> g) {
        return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
      },
      [](std::vector<optim::ParamGroup> g) {
        return std::make_unique<optim::AdamW>(std::move(g), optim::AdamOptions(1e-2).weight_decay(0.1).amsgrad(true));
      }};
  for (const Make& make : makers) {
    auto model = make_mlp(3), reference = make_mlp(3);
    auto groups = [](nn::Sequential& m) {
      std::vector<Tensor> ps = m.parameters();
      return std::vector<optim::ParamGroup>{optim::ParamGroup({ps[0], ps[1]}),
                                            optim::ParamGroup({ps[2], ps[3]}).lr(0.05).weight_decay(0.01)};
    };
    ZeroRedundancyOptimizer opt(groups(*model), world_ptr(), make);
    std::unique_ptr<optim::Optimizer> plain = make(groups(*reference));
    ASSERT_EQ(opt.param_groups().size(), 2u);
    EXPECT_EQ(opt.param_groups()[1].lr(), 0.05);
    train_in_lockstep(*model, *reference, opt, *plain, 4);
    expect_bit_identical(model->parameters(), reference->parameters());
    // Two groups' options and SGD's momentum buffers consolidate to the plain optimiser's too.
    opt.consolidate_state_dict(0);
    if (world().rank() == 0) expect_same_state(opt.state_dict(), plain->state_dict());
  }
}

// Sizes not divisible by the world size, more ranks than big tensors, and (np 3) a rank with
// nothing: the greedy partition, then training that still matches.
TEST(ZeroRedundancy, UnevenShardsAndARankThatOwnsNothing) {
  const int n = world().size(), r = world().rank();
  auto make = [](uint64_t seed) {
    Generator gen(seed);
    std::vector<Tensor> ps;
    for (int64_t size : {3, 700, 5, 700}) ps.push_back(randn({size}, kFloat32, &gen).requires_grad_());
    return ps;
  };
  std::vector<Tensor> params = make(5), reference = make(5);
  ZeroRedundancyOptimizer opt(params, world_ptr(), adam());
  optim::Adam plain(reference, optim::AdamOptions(1e-2));
  // Biggest first, each to the least loaded rank: 700 (param 1) -> 0, 700 (param 3) -> 1, then
  // 5 and 3 to the least loaded (np 2: rank 0, then rank 1; np 3: rank 2 takes both).
  const std::vector<int> want = n == 2 ? std::vector<int>{1, 0, 0, 1} : std::vector<int>{2, 0, 2, 1};
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(opt.rank_of(params[i]), want[i]) << "parameter " << i;
  for (size_t i : opt.owned()) EXPECT_EQ(want[i], r);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      Generator gen(50 + uint64_t(s * 10) + i), same(50 + uint64_t(s * 10) + i);
      params[i].set_grad(randn(params[i].sizes(), kFloat32, &gen));
      reference[i].set_grad(randn(reference[i].sizes(), kFloat32, &same));
    }
    opt.step();
    plain.step();
  }
  expect_bit_identical(params, reference);

  // One tensor: every rank but 0 owns nothing, has no local optimiser and no state, and still
  // receives the update.
  Tensor w = full({4}, 1.0).requires_grad_(), w_ref = full({4}, 1.0).requires_grad_();
  ZeroRedundancyOptimizer single({w}, world_ptr(), adam(0.1));
  optim::Adam single_plain({w_ref}, optim::AdamOptions(0.1));
  EXPECT_EQ(single.local_optimizer() == nullptr, r != 0);
  EXPECT_EQ(single.owned().empty(), r != 0);
  for (int s = 0; s < 2; ++s) {
    w.set_grad(full({4}, 0.5 + s));
    w_ref.set_grad(full({4}, 0.5 + s));
    single.step();
    single_plain.step();
  }
  EXPECT_EQ(testing::values(w), testing::values(w_ref));
  EXPECT_EQ(single.local_state_bytes() == 0, r != 0);
}

// The state is sharded: the ranks' bytes add up to a plain optimiser's, and with many equal tensors
// each rank holds 1/N of it. Prints the bytes of mlp_seed's model (docs/distributed.md).
TEST(ZeroRedundancy, OptimizerStateBytesAreShardedAcrossRanks) {
  const int n = world().size(), r = world().rank();
  nn::Sequential deep;
  Generator gen(2);
  for (int i = 0; i < 6; ++i) deep.push_back(std::make_shared<nn::Linear>(32, 32, true, &gen));
  for (const Tensor& p : deep.parameters()) p.set_grad(full_like(p, 0.25));
  ZeroRedundancyOptimizer opt(deep.parameters(), world_ptr(), adam());
  opt.step();
  optim::Adam plain(deep.parameters(), optim::AdamOptions(1e-2));
  plain.step();
  const int64_t total = distributed::optimizer_state_bytes(plain);
  std::vector<double> bytes = gather_doubles(double(opt.local_state_bytes()));
  double sum = 0;
  for (double b : bytes) sum += b;
  EXPECT_EQ(sum, double(total));
  // 6 weights of 1024 elements and 6 biases of 32: each rank gets 6/N of each (np 2 and 3).
  for (double b : bytes) EXPECT_EQ(b, double(total) / n);

  auto model = make_mlp(1, 1000, 512, 10);  // mlp_seed's model
  for (const Tensor& p : model->parameters()) p.set_grad(full_like(p, 0.25));
  ZeroRedundancyOptimizer mlp(model->parameters(), world_ptr(), adam());
  mlp.step();
  optim::Adam mlp_plain(model->parameters(), optim::AdamOptions(1e-2));
  mlp_plain.step();
  const int64_t mlp_total = distributed::optimizer_state_bytes(mlp_plain);
  bytes = gather_doubles(double(mlp.local_state_bytes()));
  sum = 0;
  for (double b : bytes) sum += b;
  EXPECT_EQ(sum, double(mlp_total));
  if (r == 0) {
    std::printf("mlp_seed Adam state: one process %lld bytes; np %d:", static_cast<long long>(mlp_total), n);
    for (double b : bytes) std::printf(" %lld", static_cast<long long>(b));
    std::printf(" bytes per rank\n");
  }
}

TEST(ZeroRedundancy, ConsolidatedStateDictIsThePlainOptimizersAndLoadsBack) {
  const int n = world().size(), r = world().rank();
  auto model = make_mlp(9), reference = make_mlp(9);
  auto make = [](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions(1e-2).amsgrad(true));
  };
  ZeroRedundancyOptimizer opt(model->parameters(), world_ptr(), make);
  std::unique_ptr<optim::Optimizer> plain = make({optim::ParamGroup(reference->parameters())});
  train_in_lockstep(*model, *reference, opt, *plain, 3);
  const StateDict want = plain->state_dict();
  for (int to : {0, n - 1}) {
    opt.consolidate_state_dict(to);
    if (r == to)
      expect_same_state(opt.state_dict(), want);
    else
      testing::expect_error([&] { opt.state_dict(); },
                            {"ZeroRedundancyOptimizer.state_dict", "consolidate_state_dict"});
  }

  // The full state loads into a plain optimiser, and into a fresh ZeRO on every rank (each keeps
  // its shard): training on from there matches the plain optimiser.
  auto resumed = make_mlp(9), resumed_ref = make_mlp(9), resumed_plain = make_mlp(9);
  for (auto* m : {resumed.get(), resumed_ref.get(), resumed_plain.get()}) {
    std::vector<Tensor> src = reference->parameters(), dst = m->parameters();
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  ZeroRedundancyOptimizer loaded(resumed->parameters(), world_ptr(), make);
  loaded.load_state_dict(want);
  std::unique_ptr<optim::Optimizer> plain_loaded = make({optim::ParamGroup(resumed_plain->parameters())});
  opt.consolidate_state_dict(0);
  plain_loaded->load_state_dict(r == 0 ? opt.state_dict() : want);
  EXPECT_EQ(loaded.local_state_bytes() == 0, loaded.owned().empty());
  for (int s = 3; s < 5; ++s) {
    backward(*resumed, s);
    backward(*reference, s);
    backward(*resumed_plain, s);
    loaded.step();
    plain->step();
    plain_loaded->step();
    loaded.zero_grad();
    plain->zero_grad();
    plain_loaded->zero_grad();
  }
  expect_bit_identical(resumed->parameters(), reference->parameters());
  expect_bit_identical(resumed_plain->parameters(), reference->parameters());
  // A step makes the consolidated state stale.
  opt.step();
  testing::expect_error([&] { opt.state_dict(); }, {"consolidate_state_dict"});
  testing::expect_error([&] { opt.consolidate_state_dict(n); }, {"consolidate_state_dict", "out of range"});
}

// The rest of a training step around it: DDP with gradient accumulation under no_sync, a
// GradScaler (scale, unscale_, a step skipped for an inf gradient, update) and clip_grad_norm_
// (stage 1 keeps whole gradients, so the local norm is the global one). The sharded optimiser and a
// plain one, each under its own DDP replica on this rank's rows, stay bit-identical.
TEST(ZeroRedundancy, WithDdpNoSyncGradScalerAndClippingMatchesAPlainOptimizer) {
  const int n = world().size(), r = world().rank();
  auto sharded_model = make_mlp(21), plain_model = make_mlp(21);
  distributed::DistributedDataParallel sharded_ddp(sharded_model, world_ptr()), plain_ddp(plain_model, world_ptr());
  ZeroRedundancyOptimizer sharded(sharded_model->parameters(), world_ptr(), adam());
  optim::Adam plain(plain_model->parameters(), optim::AdamOptions(1e-2));
  amp::GradScaler sharded_scaler(1024.0, 2.0, 0.5, 2), plain_scaler(1024.0, 2.0, 0.5, 2);
  auto train = [&](distributed::DistributedDataParallel& ddp, nn::Sequential& model, optim::Optimizer& opt,
                   amp::GradScaler& scaler, int step) {
    for (int micro = 0; micro < 2; ++micro) {
      Example e = batch(100 + step * 10 + micro * n + r);  // this rank's rows
      auto backward_pass = [&] { scaler.scale(cross_entropy(ddp.forward(e.input), e.target) * 0.5).backward(); };
      if (micro == 0) {
        auto guard = ddp.no_sync();
        backward_pass();
      } else {
        backward_pass();
      }
    }
    if (step == 2) model.parameters()[0].grad().data<float>()[0] = std::numeric_limits<float>::infinity();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_(model.parameters(), 0.5);
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
  };
  for (int s = 0; s < 5; ++s) {
    const std::vector<double> before = testing::values(sharded_model->parameters()[2]);
    train(sharded_ddp, *sharded_model, sharded, sharded_scaler, s);
    train(plain_ddp, *plain_model, plain, plain_scaler, s);
    // The inf at step 2 skipped the update on every rank: the owner's shard and the broadcasts.
    EXPECT_EQ(testing::values(sharded_model->parameters()[2]) == before, s == 2) << "step " << s;
  }
  EXPECT_EQ(sharded_scaler.get_scale(), plain_scaler.get_scale());
  expect_bit_identical(sharded_model->parameters(), plain_model->parameters());
  std::vector<std::vector<double>> all = params_of_every_rank(sharded_model->parameters());
  for (const auto& a : all) EXPECT_EQ(a, all.front());
}

// Sharded checkpoints: each rank saves its shard to a file of its own and loads it back; training
// on matches the uninterrupted run bit for bit. Another world size, another rank's file or a
// consolidated dict is refused, changing nothing.
TEST(ZeroRedundancy, ShardedStateDictResumesOnTheSameWorldSize) {
  const int n = world().size(), r = world().rank();
  auto model = make_mlp(13), reference = make_mlp(13);
  ZeroRedundancyOptimizer opt(model->parameters(), world_ptr(), adam());
  optim::Adam plain(reference->parameters(), optim::AdamOptions(1e-2));
  optim::StepLR sched(opt, 2, 0.5), plain_sched(plain, 2, 0.5);
  train_in_lockstep(*model, *reference, opt, plain, 3, [&] {
    sched.step();
    plain_sched.step();
  });
  const std::string path =
      ::testing::TempDir() + "zero_shard_" + std::to_string(n) + "_" + std::to_string(r) + ".safetensors";
  StateDict saved = opt.sharded_state_dict();
  save_safetensors(path, saved);
  // Only this rank's parameters carry state.
  for (const auto& [key, t] : saved)
    if (key.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(key[0])))
      EXPECT_EQ(opt.rank_of(size_t(std::stoll(key.substr(0, key.find('.'))))), r) << key;

  auto resumed = make_mlp(13);
  {
    std::vector<Tensor> src = model->parameters(), dst = resumed->parameters();
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  ZeroRedundancyOptimizer loaded(resumed->parameters(), world_ptr(), adam(0.5));  // options come from the file
  loaded.load_sharded_state_dict(load_safetensors(path));
  EXPECT_EQ(loaded.lr(), opt.lr());
  for (int s = 3; s < 6; ++s) {
    backward(*resumed, s);
    backward(*reference, s);
    loaded.step();
    plain.step();
    loaded.zero_grad();
    plain.zero_grad();
  }
  expect_bit_identical(resumed->parameters(), reference->parameters());

  auto edited = [&](const std::string& key, double value) {
    StateDict copy = saved;
    for (auto& [k, t] : copy)
      if (k == key) t = full({}, value, kFloat64);
    return copy;
  };
  testing::expect_error([&] { loaded.load_sharded_state_dict(edited("zero.world_size", n + 2)); },
                        {"load_sharded_state_dict", "saved by " + std::to_string(n + 2) + " ranks",
                         "this group has " + std::to_string(n), "load_state_dict"});
  testing::expect_error([&] { loaded.load_sharded_state_dict(edited("zero.rank", (r + 1) % n)); },
                        {"load_sharded_state_dict", "rank " + std::to_string((r + 1) % n) + "'s shard"});
  opt.consolidate_state_dict(0);
  if (r == 0)
    testing::expect_error([&] { loaded.load_sharded_state_dict(opt.state_dict()); },
                          {"load_sharded_state_dict", "zero.world_size", "not a sharded state dict"});
  std::remove(path.c_str());
}

// Negative control: the local step alone moves only this rank's shard, so without the broadcast the
// replicas differ; step() makes them agree again.
TEST(ZeroRedundancy, WithoutTheBroadcastTheReplicasDiffer) {
  auto model = make_mlp(4);
  ZeroRedundancyOptimizer opt(model->parameters(), world_ptr(), adam());
  const std::vector<Tensor> params = model->parameters();
  std::vector<std::vector<double>> before;
  for (const Tensor& p : params) before.push_back(testing::values(p));
  backward(*model, 0);
  ASSERT_NE(opt.local_optimizer(), nullptr);  // np 2 and 3: the MLP's 4 tensors cover every rank
  opt.local_optimizer()->step();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(testing::values(params[i]) == before[i], opt.rank_of(i) != world().rank()) << "parameter " << i;
  std::vector<std::vector<double>> all = params_of_every_rank(params);
  bool differ = false;
  for (const auto& a : all) differ = differ || a != all.front();
  EXPECT_TRUE(differ);
  opt.step();  // a second update on the owners, then the broadcast
  all = params_of_every_rank(params);
  for (const auto& a : all) EXPECT_EQ(a, all.front());
}

TEST(ZeroRedundancyErrors, BadInputNamesTheOpAndTheCulprit) {
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}).requires_grad_(), frozen = zeros({5});
  testing::expect_error([&] { ZeroRedundancyOptimizer(std::vector<Tensor>{}, world_ptr(), adam()); },
                        {"ZeroRedundancyOptimizer", "no parameter"});
  testing::expect_error([&] { ZeroRedundancyOptimizer({frozen}, world_ptr(), adam()); },
                        {"ZeroRedundancyOptimizer", "no parameter that requires grad"});
  testing::expect_error(
      [&] {
        ZeroRedundancyOptimizer({a, Tensor()}, world_ptr(), adam());
      },
      {"ZeroRedundancyOptimizer", "parameter 1 of group 0 is undefined"});
  testing::expect_error(
      [&] {
        ZeroRedundancyOptimizer({optim::ParamGroup({a}), optim::ParamGroup({b, a})}, world_ptr(), adam());
      },
      {"ZeroRedundancyOptimizer", "parameter 1 of group 1 is also parameter 0 of group 0"});
  testing::expect_error([&] { ZeroRedundancyOptimizer({a}, nullptr, adam()); }, {"process group is null"});
  testing::expect_error([&] { ZeroRedundancyOptimizer({a}, world_ptr(), nullptr); }, {"factory"});
  testing::expect_error([&] { ZeroRedundancyOptimizer({a}, world_ptr(), adam(-1)); },
                        {"ZeroRedundancyOptimizer", "refused", "learning rate"});

  Tensor other = zeros({3}).requires_grad_();
  auto elsewhere = [&](std::vector<optim::ParamGroup>) {
    return std::make_unique<optim::Adam>(std::vector<Tensor>{other});
  };
  testing::expect_error([&] { ZeroRedundancyOptimizer({a}, world_ptr(), elsewhere); },
                        {"ZeroRedundancyOptimizer", "factory must build its optimizer over the groups it is given"});

  // A frozen parameter is skipped.
  ZeroRedundancyOptimizer opt({a, frozen, b}, world_ptr(), adam());
  ASSERT_EQ(opt.params().size(), 2u);
  testing::expect_error([&] { opt.rank_of(frozen); }, {"ZeroRedundancyOptimizer.rank_of", "not one of"});
  testing::expect_error([&] { opt.add_param_group(optim::ParamGroup({zeros({1}).requires_grad_()})); },
                        {"add_param_group", "not supported"});
  // An invalid lr set by hand fails on every rank, before any collective.
  opt.param_groups()[0].lr(-1);
  a.set_grad(ones({3}));
  testing::expect_error([&] { opt.step(); }, {"ZeroRedundancyOptimizer", "parameter group 0", "learning rate"});
  EXPECT_EQ(testing::values(a), std::vector<double>(3, 0.0));
  testing::expect_error([&] { opt.state_dict(); }, {"consolidate_state_dict"});

  // A full state of another layout is refused on every rank, changing nothing.
  opt.param_groups()[0].lr(0.5);
  optim::Adam two_groups({optim::ParamGroup({a}), optim::ParamGroup({b})});
  testing::expect_error([&] { opt.load_state_dict(two_groups.state_dict()); },
                        {"ZeroRedundancyOptimizer.load_state_dict", "parameter groups"});
  StateDict bad = optim::Adam({a, b}).state_dict();
  bad.emplace_back("7.exp_avg", zeros({3}));
  testing::expect_error([&] { opt.load_state_dict(bad); }, {"ZeroRedundancyOptimizer", "7.exp_avg"});
  EXPECT_EQ(opt.lr(), 0.5);
}

// A wrong partition is caught: ranks that pass different parameters would broadcast into the
// wrong tensors, so the constructor refuses them on every rank.
// A local update that throws on one rank: every rank throws, naming it and the step, instead of
// leaving the others in the broadcasts; the group stays usable and the next step goes through.
class PlantedFailureAdam : public optim::Adam {
 public:
  PlantedFailureAdam(std::vector<optim::ParamGroup> groups, const bool* fail)
      : optim::Adam(std::move(groups), optim::AdamOptions(1e-2)), fail_(fail) {}
  void step() override {
    if (*fail_) throw Error("planted failure in the local update");
    optim::Adam::step();
  }

 private:
  const bool* fail_;
};

TEST(ZeroRedundancyErrors, ALocalStepThatThrowsFailsEveryRankNamingItAndTheStep) {
  const int r = world().rank();
  auto model = make_mlp(6);
  bool fail = false;
  ZeroRedundancyOptimizer opt(model->parameters(), world_ptr(), [&fail](std::vector<optim::ParamGroup> groups) {
    return std::make_unique<PlantedFailureAdam>(std::move(groups), &fail);
  });
  backward(*model, 0);
  opt.step();
  fail = r == 1;  // step 1 fails on rank 1 only
  std::vector<std::string> want = {"ZeroRedundancyOptimizer.step", "step 1 failed on rank 1",
                                   "no parameter was broadcast"};
  if (r == 1) want.push_back("planted failure");
  testing::expect_error([&] { opt.step(); }, want);
  fail = false;
  opt.step();  // the group is still usable: everyone steps and broadcasts again
  EXPECT_EQ(opt.steps(), 3);
  std::vector<std::vector<double>> all = params_of_every_rank(model->parameters());
  for (const auto& a : all) EXPECT_EQ(a, all.front());
}

TEST(ZeroRedundancyErrors, RanksWithDifferentParametersAreRefused) {
  const int r = world().rank();
  std::vector<Tensor> params = {zeros({4}).requires_grad_(), zeros({6}).requires_grad_()};
  if (r == 1) params.push_back(zeros({2}).requires_grad_());
  testing::expect_error([&] { ZeroRedundancyOptimizer(params, world_ptr(), adam()); },
                        {"ZeroRedundancyOptimizer", "same sizes", "rank 0 passed 2 parameters (10 elements)",
                         "rank 1 3 parameters (12 elements)"});
  std::vector<Tensor> resized = {zeros({r == 1 ? 5 : 4}).requires_grad_(), zeros({6}).requires_grad_()};
  testing::expect_error([&] { ZeroRedundancyOptimizer(resized, world_ptr(), adam()); },
                        {"same sizes", "different sizes"});
}

}  // namespace
}  // namespace tapegrad
