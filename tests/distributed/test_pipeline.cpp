// Pipeline: stage s on rank s, against one process training the whole model on the whole batch.
//
// Tolerance: 1e-6 relative. The pipeline computes the same products, but the batch's gradient is
// a weighted sum over micro-batches instead of one reduction over all rows, so the sums round
// differently; a negative control (a wrong loss weight) shows the check is not vacuous.
#include <algorithm>
#include <cmath>
#include <functional>

#include "distributed_test.h"
#include "tapegrad/distributed/pipeline.h"

namespace tapegrad {
namespace {

using distributed::MicroBatch;
using distributed::Pipeline;
using distributed::PipelineOptions;
using distributed::PipelineSchedule;
using testing::world;
using testing::world_ptr;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t layers) {
  Generator gen(seed);
  auto model = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < layers; ++i) {
    model->push_back(std::make_shared<nn::Linear>(i == 0 ? 6 : 12, i + 1 == layers ? 4 : 12, true, &gen));
    if (i + 1 < layers) model->push_back(std::make_shared<nn::Tanh>());
  }
  return model;
}

Example batch(int64_t step, int64_t rows) {
  Generator gen(500 + uint64_t(step));
  return {randn({rows, 6}, kFloat32, &gen), randint(0, 4, {rows}, kInt64, &gen)};
}

// Largest |a - b| / max(1, |b|) over two parameter lists.
double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    std::vector<double> x = testing::values(a[i]), y = testing::values(b[i]);
    EXPECT_EQ(x.size(), y.size());
    for (size_t j = 0; j < std::min(x.size(), y.size()); ++j)
      worst = std::max(worst, std::abs(x[j] - y[j]) / std::max(1.0, std::abs(y[j])));
  }
  return worst;
}

// The largest of every rank's value.
double max_over_ranks(double mine) {
  Tensor t = tensor<double>({mine}, {1});
  world().all_reduce(t, distributed::ReduceOp::Max);
  return t.item();
}

// Trains `steps` steps of a pipelined MLP (this rank's stage) and of the whole MLP in one process,
// with Adam, and returns the largest relative difference of this stage's parameters.
double train_mlp_against_one_process(PipelineOptions options, int64_t rows, int steps, double weight_error = 0) {
  const int64_t layers = world().size() + 1;
  auto model = make_mlp(11, layers), reference = make_mlp(11, layers);
  auto stages = distributed::split_sequential(*model, world().size());
  auto stage = stages[size_t(world().rank())];
  Pipeline pipe(stage, world_ptr(), options);
  pipe.set_loss([](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
    return cross_entropy(out[0], target[0]);
  });
  optim::Adam opt(stage->parameters(), optim::AdamOptions(1e-2));
  optim::Adam ref_opt(reference->parameters(), optim::AdamOptions(1e-2));
  for (int s = 0; s < steps; ++s) {
    Example e = batch(s, rows);
    double loss;
    if (weight_error == 0) {
      loss = pipe.step(e.input, e.target);
    } else {  // the negative control: micro-batch 0's loss weighted wrongly
      std::vector<MicroBatch> in, tg;
      std::vector<double> w;
      const int64_t m = options.micro_batches_;
      for (int64_t k = 0; k < m; ++k) {
        in.push_back({e.input.narrow(0, k * rows / m, rows / m)});
        tg.push_back({e.target.narrow(0, k * rows / m, rows / m)});
        w.push_back(1.0 / double(m) + (k == 0 ? weight_error : 0.0));
      }
      loss = pipe.step(pipe.is_first() ? in : std::vector<MicroBatch>{},
                       pipe.is_last() ? tg : std::vector<MicroBatch>{}, pipe.is_last() ? w : std::vector<double>{});
    }
    opt.step();
    opt.zero_grad();
    Tensor ref_loss = cross_entropy(reference->forward(e.input), e.target);
    ref_loss.backward();
    ref_opt.step();
    ref_opt.zero_grad();
    if (weight_error == 0) EXPECT_NEAR(loss, ref_loss.item(), 1e-5) << "step " << s;
  }
  // This stage's parameters are those of its modules in the reference.
  std::vector<Tensor> ref_params;
  auto whole = distributed::split_sequential(*reference, world().size());
  for (const Tensor& p : whole[size_t(world().rank())]->parameters()) ref_params.push_back(p);
  return max_over_ranks(max_relative_difference(stage->parameters(), ref_params));
}

TEST(Pipeline, OneFOneBMatchesOneProcessOnTheWholeBatch) {
  for (int64_t micro : {1, 2, 4}) {
    double diff = train_mlp_against_one_process(PipelineOptions().micro_batches(micro), 12, 4);
    EXPECT_LE(diff, 1e-6) << micro << " micro-batches";
  }
}

TEST(Pipeline, GPipeAndCheckpointedStagesMatchToo) {
  EXPECT_LE(train_mlp_against_one_process(PipelineOptions().micro_batches(3).schedule(PipelineSchedule::GPipe), 12, 3),
            1e-6);
  EXPECT_LE(train_mlp_against_one_process(PipelineOptions().micro_batches(3).checkpoint(true), 12, 3), 1e-6);
}

// 10 rows in 4 micro-batches: 3, 3, 2, 2, each loss weighted by its rows.
TEST(Pipeline, UnevenMicroBatchesAreWeightedByTheirRows) {
  EXPECT_LE(train_mlp_against_one_process(PipelineOptions().micro_batches(4), 10, 3), 1e-6);
}

TEST(Pipeline, AWrongLossWeightIsCaught) {  // the negative control of the tolerance above
  EXPECT_GT(train_mlp_against_one_process(PipelineOptions().micro_batches(2), 12, 3, 0.05), 1e-4);
}

TEST(Pipeline, OneFOneBHoldsFewerMicroBatchesThanGPipe) {
  auto model = make_mlp(3, world().size() + 1);
  auto stage = distributed::split_sequential(*model, world().size())[size_t(world().rank())];
  auto loss = [](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
    return cross_entropy(out[0], target[0]);
  };
  Example e = batch(0, 16);
  Pipeline one_f(stage, world_ptr(), PipelineOptions().micro_batches(8));
  Pipeline gpipe(stage, world_ptr(), PipelineOptions().micro_batches(8).schedule(PipelineSchedule::GPipe));
  one_f.set_loss(loss);
  gpipe.set_loss(loss);
  one_f.step(e.input, e.target);
  gpipe.step(e.input, e.target);
  EXPECT_EQ(gpipe.last_step_times().max_in_flight, 8);
  EXPECT_EQ(one_f.last_step_times().max_in_flight, world().size() - world().rank());
  EXPECT_GT(one_f.last_step_times().total, 0);
  EXPECT_EQ(one_f.steps(), 1);
}

TEST(Pipeline, EvalStepRunsTheForwardsOnly) {
  auto model = make_mlp(9, world().size() + 1), reference = make_mlp(9, world().size() + 1);
  auto stage = distributed::split_sequential(*model, world().size())[size_t(world().rank())];
  Pipeline pipe(stage, world_ptr(), PipelineOptions().micro_batches(3));
  pipe.set_loss([](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
    return cross_entropy(out[0], target[0]);
  });
  Example e = batch(3, 9);
  std::vector<MicroBatch> in, tg;
  for (int64_t m = 0; m < 3; ++m) {
    in.push_back({e.input.narrow(0, 3 * m, 3)});
    tg.push_back({e.target.narrow(0, 3 * m, 3)});
  }
  const double loss =
      pipe.eval_step(pipe.is_first() ? in : std::vector<MicroBatch>{}, pipe.is_last() ? tg : std::vector<MicroBatch>{});
  EXPECT_NEAR(loss, cross_entropy(reference->forward(e.input), e.target).item(), 1e-6);
  for (const Tensor& p : stage->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(pipe.last_step_times().max_in_flight, 0);
  EXPECT_EQ(pipe.steps(), 1);
  // A training step after it still matches (the eval left nothing behind in the channels).
  EXPECT_NEAR(pipe.step(e.input, e.target), loss, 1e-6);
}

// A stacked LSTM cut by layers (LSTM::slice_layers), time-major with per-row lengths passed along
// from stage to stage, and a Linear head on the last stage.
TEST(Pipeline, StackedLstmWithLengthsMatchesOneProcess) {
  const int64_t n = world().size(), r = world().rank();
  const int64_t layers = 2 * n, hidden = 8, steps = 5, rows = 6;
  Generator gen(21);
  nn::LSTM whole(5, hidden, nn::LSTMOptions().num_layers(layers), &gen);
  nn::Linear head(hidden, 3, true, &gen);
  std::shared_ptr<nn::LSTM> mine = whole.slice_layers(2 * r, 2 * r + 2);
  std::shared_ptr<nn::LSTM> reference = whole.slice_layers(0, layers);
  nn::Linear ref_head(hidden, 3, true, &gen);
  {
    autograd::NoGradGuard no_grad;
    ref_head.weight.copy_(head.weight);
    ref_head.bias.copy_(head.bias);
  }
  auto stage = [&](const std::vector<Tensor>& in, int64_t) {
    // in: {x [T, B, I], lengths [B]}; out: {y [T, B, H] or logits, lengths}
    Tensor y = mine->forward(in[0], {}, {}, in[1]).output;
    if (r == n - 1) y = head.forward(y);
    return std::vector<Tensor>{y, in[1]};
  };
  Pipeline pipe(stage, world_ptr(), PipelineOptions().micro_batches(3).batch_dim(1));
  auto masked_loss = [](const Tensor& logits, const Tensor& target) {
    return cross_entropy(logits.reshape({-1, 3}), target.reshape({-1}), CrossEntropyOptions{Reduction::Sum});
  };
  Generator data(4);
  Tensor x = randn({steps, rows, 5}, kFloat32, &data);
  Tensor lengths = tensor<int64_t>({5, 3, 4, 1, 5, 2}, {rows});
  Tensor target = randint(0, 3, {steps, rows}, kInt64, &data);
  for (int64_t t = 0; t < steps; ++t)  // padded steps are ignored
    for (int64_t b = 0; b < rows; ++b)
      if (t >= lengths.data<int64_t>()[b]) target.data<int64_t>()[t * rows + b] = -100;
  const double real = 20;  // the sum of the lengths
  pipe.set_loss([&](const std::vector<Tensor>& out, const std::vector<Tensor>& tg, int64_t) {
    return masked_loss(out[0], tg[0]) / real;
  });
  std::vector<MicroBatch> in, tg;
  for (int64_t m = 0; m < 3; ++m) {
    in.push_back({x.narrow(1, 2 * m, 2), lengths.narrow(0, 2 * m, 2)});
    tg.push_back({target.narrow(1, 2 * m, 2)});
  }
  const double loss = pipe.step(in, tg, std::vector<double>(3, 1.0));
  Tensor ref_loss = masked_loss(ref_head.forward(reference->forward(x, {}, {}, lengths).output), target) / real;
  ref_loss.backward();
  EXPECT_NEAR(loss, ref_loss.item(), 1e-5);
  // This stage's gradients against the reference's layers 2r, 2r + 1.
  StateDict got = mine->named_parameters(), want = reference->named_parameters();
  for (const auto& [name, p] : got) {
    std::string layer = name.substr(name.find("_l") + 2);
    std::string ref_name = name.substr(0, name.find("_l") + 2) + std::to_string(std::stoll(layer) + 2 * r);
    auto found = std::find_if(want.begin(), want.end(), [&](const auto& e) { return e.first == ref_name; });
    ASSERT_NE(found, want.end()) << ref_name;
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LE(max_relative_difference({p.grad()}, {found->second.grad()}), 1e-6) << name;
  }
  if (r == n - 1) EXPECT_LE(max_relative_difference({head.weight.grad()}, {ref_head.weight.grad()}), 1e-6);
}

TEST(Pipeline, SplitSequentialBalancesParametersAndKeepsEveryModule) {
  nn::Sequential model(nn::Linear(4, 100), nn::ReLU(), nn::Linear(100, 100), nn::ReLU(), nn::Linear(100, 2));
  auto two = distributed::split_sequential(model, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0]->size() + two[1]->size(), 5u);
  EXPECT_EQ(two[0]->size(), 3u);  // 500 + 10100 of 10802 parameters reach half at the second Linear
  auto five = distributed::split_sequential(model, 5);
  for (const auto& part : five) EXPECT_EQ(part->size(), 1u);
  auto given = distributed::split_sequential(model, 2, {1});
  EXPECT_EQ(given[0]->size(), 1u);
  EXPECT_EQ(given[0]->parameters()[0].data_ptr(), model.parameters()[0].data_ptr());  // shared, not copied
  testing::expect_error([&] { distributed::split_sequential(model, 6); }, {"split_sequential", "5 modules", "6"});
  testing::expect_error([&] { distributed::split_sequential(model, 2, {0}); }, {"split_sequential", "boundary 0"});
  EXPECT_NEAR(distributed::pipeline_bubble_bound(4, 4), 3.0 / 7.0, 1e-12);
}

// --- errors: each test uses a group of its own, since a failed step aborts its group ------------

std::shared_ptr<distributed::ProcessGroup> fresh_group() {
  distributed::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  return std::make_shared<distributed::ProcessGroup>(options);
}

// Runs `body` (a pipeline step) on every rank and expects it to throw, naming `fragments` on every
// rank and `own` too on the rank that failed; then the group refuses further use.
void expect_step_fails_everywhere(distributed::ProcessGroup& group, const std::function<void()>& body,
                                  const std::vector<std::string>& fragments, int culprit, const std::string& own) {
  std::vector<std::string> want = fragments;
  if (group.rank() == culprit) want.push_back(own);
  testing::expect_error(body, want);
  testing::expect_error([&] { group.barrier(); }, {"no longer be used", "Pipeline step"});
}

TEST(PipelineErrors, AStageThatThrowsMidStepFailsEveryRankNamingItAndTheStep) {
  auto group = fresh_group();
  const int n = group->size(), bad = 1;  // the last stage at np 2, a middle one at np 3
  auto model = make_mlp(5, n + 1);
  auto stage = distributed::split_sequential(*model, n)[size_t(group->rank())];
  int step = 0;
  Pipeline pipe(
      [&](const std::vector<Tensor>& in, int64_t m) {
        // Micro-batch 2 of step 1 fails on rank `bad`, after micro-batches 0 and 1 went through.
        if (group->rank() == bad && step == 1 && m == 2) throw std::runtime_error("planted failure");
        return std::vector<Tensor>{stage->forward(in[0])};
      },
      group, PipelineOptions().micro_batches(4));
  pipe.set_loss([](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
    return cross_entropy(out[0], target[0]);
  });
  Example e = batch(0, 8);
  pipe.step(e.input, e.target);
  step = 1;
  expect_step_fails_everywhere(
      *group, [&] { pipe.step(e.input, e.target); }, {"Pipeline", "step 1 failed on rank 1", "no longer usable"}, bad,
      "planted failure");
}

TEST(PipelineErrors, ALossThatThrowsOnTheLastStageFailsEveryRank) {
  auto group = fresh_group();
  const int n = group->size();
  auto model = make_mlp(5, n + 1);
  Pipeline pipe(distributed::split_sequential(*model, n)[size_t(group->rank())], group,
                PipelineOptions().micro_batches(2));
  pipe.set_loss([](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
    return cross_entropy(out[0], target[0]);
  });
  Example e = batch(0, 4);
  Tensor bad_target = full({4}, 9.0, kInt64);  // class 9 of 4
  expect_step_fails_everywhere(
      *group, [&] { pipe.step(e.input, bad_target); }, {"step 0 failed on rank " + std::to_string(n - 1)}, n - 1,
      "cross_entropy");
}

TEST(PipelineErrors, BadArgumentsOnOneRankFailTheStepOnEveryRank) {
  {  // the last stage has no loss
    auto group = fresh_group();
    auto model = make_mlp(5, group->size() + 1);
    Pipeline pipe(distributed::split_sequential(*model, group->size())[size_t(group->rank())], group,
                  PipelineOptions().micro_batches(2));
    Example e = batch(0, 4);
    const int last = group->size() - 1;
    expect_step_fails_everywhere(
        *group, [&] { pipe.step(e.input, e.target); }, {"failed on rank " + std::to_string(last)}, last, "set_loss");
  }
  {  // the first stage's input has fewer rows than micro-batches
    auto group = fresh_group();
    auto model = make_mlp(5, group->size() + 1);
    Pipeline pipe(distributed::split_sequential(*model, group->size())[size_t(group->rank())], group,
                  PipelineOptions().micro_batches(4));
    pipe.set_loss([](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
      return cross_entropy(out[0], target[0]);
    });
    Example e = batch(0, 3);
    expect_step_fails_everywhere(
        *group, [&] { pipe.step(e.input, e.target); }, {"step 0 failed on rank"}, 0, "3 rows along dim 0");
  }
}

// Ranks that disagree on the step: another micro-batch count on rank 0, or eval_step() against
// step(). The next stage finds out from the first message's header and every rank fails by name.
TEST(PipelineErrors, RanksThatDisagreeOnTheStepFailEveryRank) {
  auto loss = [](const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
    return cross_entropy(out[0], target[0]);
  };
  {
    auto group = fresh_group();
    auto model = make_mlp(5, group->size() + 1);
    Pipeline pipe(distributed::split_sequential(*model, group->size())[size_t(group->rank())], group,
                  PipelineOptions().micro_batches(group->rank() == 0 ? 2 : 4));
    pipe.set_loss(loss);
    Example e = batch(0, 8);
    expect_step_fails_everywhere(
        *group, [&] { pipe.step(e.input, e.target); }, {"step 0 failed on rank 1"}, 1,
        "rank 0 runs 2 micro-batches per step and this rank 4");
  }
  {
    auto group = fresh_group();
    auto model = make_mlp(5, group->size() + 1);
    Pipeline pipe(distributed::split_sequential(*model, group->size())[size_t(group->rank())], group,
                  PipelineOptions().micro_batches(2));
    pipe.set_loss(loss);
    Example e = batch(0, 8);
    std::vector<MicroBatch> in{{e.input.narrow(0, 0, 4)}, {e.input.narrow(0, 4, 4)}};
    std::vector<MicroBatch> tg{{e.target.narrow(0, 0, 4)}, {e.target.narrow(0, 4, 4)}};
    auto mine_in = pipe.is_first() ? in : std::vector<MicroBatch>{};
    auto mine_tg = pipe.is_last() ? tg : std::vector<MicroBatch>{};
    expect_step_fails_everywhere(
        *group, [&] { group->rank() == 0 ? pipe.eval_step(mine_in, mine_tg) : pipe.step(mine_in, mine_tg); },
        {"step 0 failed on rank 1"}, 1, "rank 0 called eval_step() and this rank step()");
  }
}

TEST(PipelineErrors, ConstructorRefusesBadOptions) {
  auto model = make_mlp(5, 2);
  auto stage = std::static_pointer_cast<nn::UnaryModule>(model);
  testing::expect_error([&] { Pipeline p(stage, world_ptr(), PipelineOptions().micro_batches(0)); },
                        {"Pipeline", "micro_batches", "0"});
  testing::expect_error([&] { Pipeline p(stage, world_ptr(), PipelineOptions().tag(-1)); }, {"Pipeline", "tag -1"});
  testing::expect_error([&] { Pipeline p(stage, nullptr); }, {"Pipeline", "process group is null"});
  testing::expect_error([&] { Pipeline p(std::shared_ptr<nn::UnaryModule>(), world_ptr()); }, {"Pipeline", "null"});
  Pipeline ok(stage, world_ptr());
  testing::expect_error([&] { ok.set_loss(nullptr); }, {"set_loss", "null"});
}

}  // namespace
}  // namespace tapegrad
