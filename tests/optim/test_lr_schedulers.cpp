// Learning-rate schedulers against PyTorch's documented closed forms and chainable recurrences
// (written out here in double, independently of the library), over many epochs and over several
// parameter groups with different initial lrs; and their state for resuming.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

const double kPi = 3.14159265358979323846;

// Two groups with different lrs, so each group's own initial_lr is exercised.
struct TwoGroups {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  optim::SGD opt{{optim::ParamGroup({a}), optim::ParamGroup({b}).lr(0.02)}, optim::SGDOptions(0.1).momentum(0.9)};
  std::vector<double> lrs() const {
    std::vector<double> out;
    for (const optim::ParamGroup& g : opt.param_groups()) out.push_back(g.lr());
    return out;
  }
};

// PyTorch's recurrence: lr(epoch) from lr(epoch - 1), the group's current lr and its initial lr.
using Recurrence = std::function<double(int64_t epoch, double lr, double base)>;

// Steps `sched` for `epochs` epochs and compares every group's lr with the recurrence, which starts
// from lr0(base) at epoch 0.
void expect_follows(const TwoGroups& run, optim::LRScheduler& sched, int epochs,
                    const std::function<double(double)>& lr0, const Recurrence& next, double rel_tol = 1e-12) {
  const std::vector<double> base{0.1, 0.02};
  std::vector<double> ref{lr0(base[0]), lr0(base[1])};
  for (int64_t e = 0; e <= epochs; ++e) {
    if (e > 0) {
      sched.step();
      for (size_t g = 0; g < 2; ++g) ref[g] = next(e, ref[g], base[g]);
    }
    ASSERT_EQ(sched.last_epoch(), e);
    const std::vector<double> got = run.lrs();
    for (size_t g = 0; g < 2; ++g) {
      EXPECT_NEAR(got[g], ref[g], rel_tol * std::abs(ref[g]) + 1e-300) << "epoch " << e << " group " << g;
      EXPECT_EQ(sched.get_last_lr()[g], got[g]);
    }
  }
}

TEST(LRSchedulers, StepLRFollowsPyTorchsRecurrence) {
  TwoGroups run;
  optim::StepLR sched(run.opt, 3, 0.5);
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{0.1, 0.02}));
  expect_follows(
      run, sched, 40, [](double b) { return b; },
      [](int64_t e, double lr, double) { return e % 3 == 0 ? lr * 0.5 : lr; });
}

TEST(LRSchedulers, MultiStepLRCountsRepeatedMilestones) {
  TwoGroups run;
  optim::MultiStepLR sched(run.opt, {30, 8, 20, 20}, 0.3);  // unsorted, 20 twice: gamma^2 there
  expect_follows(
      run, sched, 45, [](double b) { return b; },
      [](int64_t e, double lr, double) { return e == 8 || e == 30 ? lr * 0.3
                                                : e == 20         ? lr * 0.3 * 0.3
                                                                  : lr; });
  sched.set_epoch(25);
  EXPECT_NEAR(run.lrs()[1], 0.02 * std::pow(0.3, 3), 1e-15);
}

TEST(LRSchedulers, ExponentialLRFollowsPyTorchsRecurrence) {
  TwoGroups run;
  optim::ExponentialLR sched(run.opt, 0.93);
  expect_follows(
      run, sched, 60, [](double b) { return b; }, [](int64_t, double lr, double) { return lr * 0.93; });
}

TEST(LRSchedulers, CosineAnnealingFollowsPyTorchsRecurrenceOverSeveralPeriods) {
  TwoGroups run;
  const int64_t t_max = 7;
  const double eta_min = 1e-3;
  optim::CosineAnnealingLR sched(run.opt, t_max, eta_min);
  // torch's CosineAnnealingLR.get_lr (the chainable form), past t_max too.
  expect_follows(
      run, sched, 5 * t_max, [](double b) { return b; },
      [&](int64_t e, double lr, double base) {
        if ((e - 1 - t_max) % (2 * t_max) == 0) return lr + (base - eta_min) * (1 - std::cos(kPi / t_max)) / 2;
        return (1 + std::cos(kPi * e / t_max)) / (1 + std::cos(kPi * (e - 1) / t_max)) * (lr - eta_min) + eta_min;
      },
      1e-10);
  sched.set_epoch(t_max);
  EXPECT_NEAR(run.lrs()[0], eta_min, 1e-15);
}

TEST(LRSchedulers, LinearLRWarmUpFollowsPyTorchsRecurrence) {
  TwoGroups run;
  const double start = 0.1, end = 0.9;
  const int64_t total = 8;
  optim::LinearLR sched(run.opt, start, end, total);
  expect_follows(
      run, sched, 20, [&](double b) { return b * start; },
      [&](int64_t e, double lr, double) {
        if (e > total) return lr;
        return lr * (1.0 + (end - start) / (total * start + (e - 1) * (end - start)));
      });
  EXPECT_NEAR(run.lrs()[0], 0.1 * end, 1e-15);
}

TEST(LRSchedulers, LinearLRDefaultsAreOneThirdToOneOverFive) {
  TwoGroups run;
  optim::LinearLR sched(run.opt);
  EXPECT_NEAR(run.lrs()[0], 0.1 / 3, 1e-17);
  for (int e = 1; e <= 5; ++e) sched.step();
  EXPECT_NEAR(run.lrs()[0], 0.1, 1e-17);
}

TEST(LRSchedulers, LambdaLROneFunctionOrOnePerGroup) {
  TwoGroups run;
  optim::LambdaLR shared(run.opt, [](int64_t e) { return 1.0 / (1.0 + e); });
  for (int e = 0; e < 10; ++e) {
    EXPECT_DOUBLE_EQ(run.lrs()[0], 0.1 / (1 + e));
    EXPECT_DOUBLE_EQ(run.lrs()[1], 0.02 / (1 + e));
    shared.step();
  }
  TwoGroups run2;
  optim::LambdaLR per_group(run2.opt, {[](int64_t e) { return std::pow(0.5, e); }, [](int64_t e) { return 1.0 + e; }});
  per_group.set_epoch(4);
  EXPECT_DOUBLE_EQ(run2.lrs()[0], 0.1 / 16);
  EXPECT_DOUBLE_EQ(run2.lrs()[1], 0.02 * 5);
  expect_error([&] { optim::LambdaLR(run2.opt, std::vector<optim::LambdaLR::Lambda>{[](int64_t) { return 1.0; }}); },
               {"LambdaLR", "expected 2 lr_lambdas", "got 1"});
  expect_error([&] { optim::LambdaLR(run2.opt, [](int64_t) { return -1.0; }); },
               {"LambdaLR", "epoch 0", "invalid learning rate -0.1"});
}

// PyTorch's OneCycleLR.get_lr, written from its documentation: phases end at pct_start * total - 1
// (and 2 * pct_start * total - 2 for three phases) and total - 1; cos or linear annealing.
struct OneCycleRef {
  double max_lr, pct_start, div = 25, final_div = 1e4, base_m = 0.85, max_m = 0.95;
  int64_t total;
  bool three_phase = false, cos = true;
  double anneal(double a, double b, double pct) const {
    return cos ? b + (a - b) / 2.0 * (std::cos(kPi * pct) + 1) : (b - a) * pct + a;
  }
  std::pair<double, double> at(int64_t step) const {
    const double initial = max_lr / div, min_lr = initial / final_div;
    struct P {
      double end, lr0, lr1, m0, m1;
    };
    std::vector<P> phases;
    if (three_phase)
      phases = {{pct_start * total - 1, initial, max_lr, max_m, base_m},
                {2 * pct_start * total - 2, max_lr, initial, base_m, max_m},
                {total - 1.0, initial, min_lr, max_m, max_m}};
    else
      phases = {{pct_start * total - 1, initial, max_lr, max_m, base_m}, {total - 1.0, max_lr, min_lr, base_m, max_m}};
    double start = 0;
    for (size_t i = 0; i < phases.size(); ++i) {
      if (step <= phases[i].end || i + 1 == phases.size()) {
        const double pct = (step - start) / (phases[i].end - start);
        return {anneal(phases[i].lr0, phases[i].lr1, pct), anneal(phases[i].m0, phases[i].m1, pct)};
      }
      start = phases[i].end;
    }
    return {0, 0};
  }
};

TEST(OneCycleLR, TwoPhaseCosWithSgdMomentumMatchesTheFormula) {
  TwoGroups run;
  const int64_t total = 50;
  optim::OneCycleLR sched(run.opt, {1.0, 0.4}, total);
  OneCycleRef ref0{1.0, 0.3}, ref1{0.4, 0.3};
  ref0.total = ref1.total = total;
  for (int64_t s = 0; s <= total; ++s) {  // one step past the end is allowed, as in PyTorch
    if (s > 0) sched.step();
    const auto [lr0, m0] = ref0.at(s);
    const auto [lr1, m1] = ref1.at(s);
    EXPECT_NEAR(run.opt.param_groups()[0].lr(), lr0, 1e-14) << "step " << s;
    EXPECT_NEAR(run.opt.param_groups()[1].lr(), lr1, 1e-14) << "step " << s;
    EXPECT_NEAR(run.opt.param_groups()[0].momentum(), m0, 1e-14) << "step " << s;
    EXPECT_NEAR(run.opt.param_groups()[1].momentum(), m1, 1e-14) << "step " << s;
  }
  // Hand values: start at max_lr / 25 with max_momentum, peak at step 14 (0.3 * 50 - 1) with
  // base_momentum, end at step 49 at max_lr / 25 / 1e4.
  sched.set_epoch(0);
  EXPECT_NEAR(run.opt.param_groups()[0].lr(), 1.0 / 25, 1e-16);
  EXPECT_NEAR(run.opt.param_groups()[0].momentum(), 0.95, 1e-16);
  sched.set_epoch(14);
  EXPECT_NEAR(run.opt.param_groups()[0].lr(), 1.0, 1e-15);
  EXPECT_NEAR(run.opt.param_groups()[0].momentum(), 0.85, 1e-15);
  sched.set_epoch(49);
  EXPECT_NEAR(run.opt.param_groups()[1].lr(), 0.4 / 25 / 1e4, 1e-18);
  EXPECT_EQ(run.opt.param_groups()[0].initial_lr(), 1.0 / 25);
  sched.set_epoch(50);
  expect_error([&] { sched.step(); }, {"OneCycleLR", "51", "total_steps is 50"});
  EXPECT_EQ(sched.last_epoch(), 50);
}

TEST(OneCycleLR, ThreePhaseLinearWithAdamBeta1MatchesTheFormula) {
  Tensor p = zeros({2}).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions(1e-3).betas(0.9, 0.99));
  const int64_t total = 37;
  optim::OneCycleLR sched(opt, 0.01, total,
                          optim::OneCycleLROptions()
                              .pct_start(0.25)
                              .anneal_strategy("linear")
                              .three_phase(true)
                              .div_factor(10)
                              .final_div_factor(100)
                              .base_momentum(0.8)
                              .max_momentum(0.9));
  OneCycleRef ref{0.01, 0.25, 10, 100, 0.8, 0.9};
  ref.total = total;
  ref.three_phase = true;
  ref.cos = false;
  for (int64_t s = 0; s < total; ++s) {
    if (s > 0) sched.step();
    const auto [lr, m] = ref.at(s);
    EXPECT_NEAR(opt.lr(), lr, 1e-15) << "step " << s;
    EXPECT_NEAR(opt.param_groups()[0].betas().first, m, 1e-15) << "step " << s;
    EXPECT_EQ(opt.param_groups()[0].betas().second, 0.99);
  }
}

TEST(OneCycleLR, BadSettingsAreErrors) {
  Tensor p = zeros({2}).requires_grad_();
  optim::SGD plain({p}, optim::SGDOptions(0.1));  // momentum 0
  {
    optim::SGD switched({p}, optim::SGDOptions(0.1));
    optim::OneCycleLR cycle(switched, 1.0, 10);  // as PyTorch: cycling momentum switches it on
    EXPECT_EQ(switched.param_groups()[0].momentum(), 0.95);
  }
  optim::OneCycleLR no_cycle(plain, 1.0, 10, optim::OneCycleLROptions().cycle_momentum(false));
  EXPECT_EQ(plain.param_groups()[0].momentum(), 0.0);
  EXPECT_NEAR(plain.lr(), 1.0 / 25, 1e-16);
  optim::SGD sgd({p}, optim::SGDOptions(0.1).momentum(0.9));
  expect_error([&] { optim::OneCycleLR(sgd, 1.0, 0); }, {"OneCycleLR", "total_steps", "0"});
  expect_error([&] { optim::OneCycleLR(sgd, 1.0, 10, optim::OneCycleLROptions().pct_start(1.5)); },
               {"pct_start", "1.5"});
  expect_error([&] { optim::OneCycleLR(sgd, 1.0, 10, optim::OneCycleLROptions().anneal_strategy("cosine")); },
               {"anneal_strategy", "'cosine'"});
  expect_error([&] { optim::OneCycleLR(sgd, std::vector<double>{1.0, 2.0}, 10); }, {"expected 1 max_lr", "got 2"});
}

// The usual warm-up then cosine: LinearLR for `warmup` epochs, then CosineAnnealingLR, whose epoch
// 0 is the milestone (PyTorch's SequentialLR calls its step(0) there).
TEST(SequentialLR, WarmUpThenCosineMatchesTheClosedForms) {
  TwoGroups run;
  const int64_t warmup = 5, t_max = 20;
  auto linear = std::make_shared<optim::LinearLR>(run.opt, 0.1, 1.0, warmup);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(run.opt, t_max, 1e-4);
  optim::SequentialLR sched(run.opt, {linear, cosine}, {warmup});
  const std::vector<double> base{0.1, 0.02};
  for (int64_t e = 0; e <= warmup + t_max + 3; ++e) {
    if (e > 0) sched.step();
    for (size_t g = 0; g < 2; ++g) {
      double expected;
      if (e < warmup)
        expected = base[g] * (0.1 + 0.9 * static_cast<double>(e) / warmup);
      else
        expected = 1e-4 + (base[g] - 1e-4) * (1 + std::cos(kPi * (e - warmup) / t_max)) / 2;
      EXPECT_NEAR(run.lrs()[g], expected, 1e-15) << "epoch " << e << " group " << g;
    }
  }
  // The cosine part starts at the full lr, the warm-up never reaches it.
  sched.set_epoch(warmup - 1);
  EXPECT_NEAR(run.lrs()[0], 0.1 * (0.1 + 0.9 * 4 / 5), 1e-16);
  sched.set_epoch(warmup);
  EXPECT_NEAR(run.lrs()[0], 0.1, 1e-16);
  EXPECT_EQ(cosine->last_epoch(), 0);
}

TEST(SequentialLR, ThreeSchedulersAndBadInput) {
  TwoGroups run;
  auto constant = std::make_shared<optim::LambdaLR>(run.opt, [](int64_t) { return 0.5; });
  auto step = std::make_shared<optim::StepLR>(run.opt, 2, 0.1);
  auto expo = std::make_shared<optim::ExponentialLR>(run.opt, 0.5);
  optim::SequentialLR sched(run.opt, {constant, step, expo}, {3, 7});
  const std::vector<double> expected{0.05, 0.05, 0.05, 0.1, 0.1, 0.01, 0.01, 0.1, 0.05, 0.025};
  for (size_t e = 0; e < expected.size(); ++e) {
    EXPECT_NEAR(run.lrs()[0], expected[e], 1e-16) << "epoch " << e;
    sched.step();
  }
  expect_error(
      [&] {
        optim::SequentialLR(run.opt, {constant, step}, {3, 7});
      },
      {"SequentialLR", "expects 1 milestones"});
  expect_error([&] { optim::SequentialLR(run.opt, {constant, step, expo}, {7, 3}); }, {"SequentialLR", "increasing"});
  TwoGroups other;
  auto foreign = std::make_shared<optim::StepLR>(other.opt, 2);
  expect_error(
      [&] {
        optim::SequentialLR(run.opt, {constant, foreign}, {3});
      },
      {"SequentialLR", "scheduler 1", "another optimiser"});
}

TEST(ReduceLROnPlateau, MinModeRelThresholdPatienceAndCooldown) {
  TwoGroups run;
  optim::ReduceLROnPlateau sched(run.opt,
                                 optim::ReduceLROnPlateauOptions().patience(2).cooldown(1).min_lr({0.0, 0.015}));
  // Worked by hand from PyTorch's recurrence (factor 0.1, threshold 1e-4 rel):
  //   epoch metric  better?  bad  cooldown  lr0
  //   1     1.0     yes      0    0         0.1
  //   2     0.99995 no (< 1 - 1e-4 needed)  1  0.1
  //   3     1.1     no       2    0         0.1
  //   4     1.2     no       3 > 2: reduce, cooldown 1, bad 0  -> 0.01 (group 1: 0.002 -> min 0.015)
  //   5     1.3     no       1 -> cooldown: bad 0, cooldown 0  0.01
  //   6     1.3     no       1    0         0.01
  //   7     1.3     no       2    0         0.01
  //   8     1.3     no       3: reduce      0.001 (group 1 stays at its min 0.015)
  //   9     0.5     yes      0              0.001
  const std::vector<double> metrics{1.0, 0.99995, 1.1, 1.2, 1.3, 1.3, 1.3, 1.3, 0.5};
  const std::vector<double> lr0{0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.001, 0.001};
  const std::vector<double> lr1{0.02, 0.02, 0.02, 0.015, 0.015, 0.015, 0.015, 0.015, 0.015};
  const std::vector<int64_t> bad{0, 1, 2, 0, 0, 1, 2, 0, 0};
  for (size_t i = 0; i < metrics.size(); ++i) {
    sched.step(metrics[i]);
    EXPECT_NEAR(run.lrs()[0], lr0[i], 1e-17) << "epoch " << i + 1;
    EXPECT_NEAR(run.lrs()[1], lr1[i], 1e-17) << "epoch " << i + 1;
    EXPECT_EQ(sched.num_bad_epochs(), bad[i]) << "epoch " << i + 1;
  }
  EXPECT_EQ(sched.best(), 0.5);
  EXPECT_EQ(sched.last_epoch(), 9);
}

TEST(ReduceLROnPlateau, MaxModeAbsThresholdAndEps) {
  TwoGroups run;
  optim::ReduceLROnPlateau sched(
      run.opt,
      optim::ReduceLROnPlateauOptions().mode("max").threshold_mode("abs").threshold(0.5).patience(0).factor(0.5));
  sched.step(1.0);  // better than -inf
  EXPECT_EQ(run.lrs()[0], 0.1);
  sched.step(1.4);  // not > 1.0 + 0.5: bad, 1 > patience 0: halve
  EXPECT_NEAR(run.lrs()[0], 0.05, 1e-17);
  sched.step(1.6);  // > 1.5: better
  EXPECT_NEAR(run.lrs()[0], 0.05, 1e-17);
  EXPECT_EQ(sched.best(), 1.6);
  // A reduction smaller than eps is not made.
  TwoGroups tiny;
  tiny.opt.set_lr(1e-8);
  optim::ReduceLROnPlateau lazy(tiny.opt, optim::ReduceLROnPlateauOptions().patience(0));
  lazy.step(1.0);
  lazy.step(2.0);
  EXPECT_EQ(tiny.lrs()[0], 1e-8);
}

TEST(ReduceLROnPlateau, BadSettingsAreErrors) {
  TwoGroups run;
  using O = optim::ReduceLROnPlateauOptions;
  expect_error([&] { optim::ReduceLROnPlateau(run.opt, O().factor(1.0)); }, {"ReduceLROnPlateau", "factor", "1"});
  expect_error([&] { optim::ReduceLROnPlateau(run.opt, O().mode("mean")); }, {"mode", "'mean'"});
  expect_error([&] { optim::ReduceLROnPlateau(run.opt, O().threshold_mode("relative")); },
               {"threshold_mode", "'relative'"});
  expect_error([&] { optim::ReduceLROnPlateau(run.opt, O().min_lr({0.1, 0.2, 0.3})); }, {"expected 2 min_lr", "got 3"});
  expect_error([&] { optim::ReduceLROnPlateau(run.opt, O().patience(-1)); }, {"patience", "-1"});
}

TEST(LRSchedulers, BadSettingsAreErrors) {
  TwoGroups run;
  expect_error([&] { optim::StepLR(run.opt, 0); }, {"StepLR", "step_size"});
  expect_error([&] { optim::MultiStepLR(run.opt, {3, -1}); }, {"MultiStepLR", "milestone -1"});
  expect_error([&] { optim::ExponentialLR(run.opt, 0.0); }, {"ExponentialLR", "gamma"});
  expect_error([&] { optim::CosineAnnealingLR(run.opt, 0); }, {"CosineAnnealingLR", "t_max"});
  expect_error([&] { optim::LinearLR(run.opt, 0.0); }, {"LinearLR", "start_factor"});
  expect_error([&] { optim::LinearLR(run.opt, 0.5, 1.5); }, {"LinearLR", "end_factor"});
  optim::StepLR sched(run.opt, 2);
  expect_error([&] { sched.set_epoch(-1); }, {"StepLR", "epoch must be >= 0"});
  run.opt.add_param_group(optim::ParamGroup({zeros({1}).requires_grad_()}));
  expect_error([&] { sched.step(); }, {"StepLR", "3 parameter groups", "made for 2"});
}

// Several schedulers of one optimiser count from the same initial lr (PyTorch's setdefault), and a
// second scheduler made later does not take the first one's current lr as its base.
TEST(LRSchedulers, InitialLrIsSetOnceAndShared) {
  TwoGroups run;
  optim::ExponentialLR first(run.opt, 0.5);
  first.step();
  first.step();
  EXPECT_NEAR(run.lrs()[0], 0.025, 1e-17);
  optim::StepLR second(run.opt, 10);
  EXPECT_EQ(second.base_lrs(), (std::vector<double>{0.1, 0.02}));
  EXPECT_EQ(run.opt.param_groups()[1].initial_lr(), 0.02);
}

// Two schedulers stepped on one optimiser compose, as PyTorch's chainable forms do: ExponentialLR
// multiplies the current lr by gamma, MultiStepLR by its gamma at a milestone. PyTorch (2.x) gives
// lr(e) = base * 0.9^e * 0.5^(milestones <= e); before, the second overwrote the first with its
// own closed form (base * 0.5^...).
TEST(LRSchedulers, TwoSchedulersOnOneOptimiserCompose) {
  TwoGroups run;
  optim::ExponentialLR exp_lr(run.opt, 0.9);
  optim::MultiStepLR steps(run.opt, {4, 2}, 0.5);  // unsorted, as PyTorch allows
  const std::vector<double> base{0.1, 0.02};
  for (int64_t e = 1; e <= 8; ++e) {
    exp_lr.step();
    steps.step();
    const double factor = std::pow(0.9, static_cast<double>(e)) * std::pow(0.5, (e >= 2) + (e >= 4));
    for (size_t g = 0; g < 2; ++g) {
      EXPECT_NEAR(run.lrs()[g], base[g] * factor, 1e-15) << "epoch " << e;
      EXPECT_EQ(steps.get_last_lr()[g], run.lrs()[g]);  // what each scheduler last set
    }
    // ExponentialLR's last lr is before MultiStepLR's factor of this epoch.
    EXPECT_NEAR(exp_lr.get_last_lr()[0], 0.1 * std::pow(0.9, static_cast<double>(e)) * std::pow(0.5, (e > 2) + (e > 4)),
                1e-15);
  }
  // A scheduler made after another has changed the lr keeps that lr (its first step is
  // chainable): PyTorch's LinearLR(0.5) then StepLR starts StepLR from 0.05, not from 0.1.
  TwoGroups warm;
  optim::LinearLR linear(warm.opt, 0.5, 1.0, 4);
  optim::StepLR step_lr(warm.opt, 2, 0.1);
  EXPECT_NEAR(warm.lrs()[0], 0.05, 1e-17);
  linear.step();  // 0.05 * (1 + 0.5 / (4 * 0.5 + 0 * 0.5)) = 0.0625
  step_lr.step();
  EXPECT_NEAR(warm.lrs()[0], 0.0625, 1e-16);
  linear.step();  // 0.0625 * (1 + 0.5 / (2 + 0.5)) = 0.075, then StepLR's epoch 2: * 0.1
  step_lr.step();
  EXPECT_NEAR(warm.lrs()[0], 0.0075, 1e-16);
  // set_epoch (PyTorch's step(epoch)) is the closed form from the base lr.
  step_lr.set_epoch(2);
  EXPECT_NEAR(warm.lrs()[0], 0.01, 1e-17);
}

// PyTorch's loop (total_steps optimiser steps, each followed by a scheduler step) reaches step
// total_steps, where OneCycleLR extrapolates the last phase: with linear annealing PyTorch gives
// lr = (min - max) * pct + max, pct = (total - start) / (total - 1 - start) > 1, here
// start = 0.3 * 10 - 1 = 2, pct = 8 / 7, lr = 1 - (1 - 4e-6) * 8 / 7, below zero. It threw before.
TEST(OneCycleLR, LinearAnnealingReachesTotalStepsAsPyTorch) {
  TwoGroups run;
  optim::OneCycleLR sched(run.opt, 1.0, 10, optim::OneCycleLROptions().anneal_strategy("linear"));
  for (int i = 0; i < 9; ++i) sched.step();
  EXPECT_NEAR(run.lrs()[0], 4e-6, 1e-15);  // step total_steps - 1: min_lr = 1 / 25 / 1e4
  sched.step();
  EXPECT_EQ(sched.last_epoch(), 10);
  EXPECT_NEAR(run.lrs()[0], 1.0 - (1.0 - 4e-6) * 8.0 / 7.0, 1e-15);
  EXPECT_NEAR(run.opt.param_groups()[0].momentum(), 0.85 + (0.95 - 0.85) * 8.0 / 7.0, 1e-15);
  // One more is PyTorch's ValueError; here a clear error, nothing changed.
  const double before = run.lrs()[0];
  expect_error([&] { sched.step(); }, {"OneCycleLR", "11", "total_steps is 10"});
  EXPECT_EQ(sched.last_epoch(), 10);
  EXPECT_EQ(run.lrs()[0], before);
  // A checkpoint taken now (the end of PyTorch's loop) loads; stepping with the negative rate is
  // refused rather than climbing the loss.
  TwoGroups fresh;
  fresh.opt.load_state_dict(run.opt.state_dict());
  EXPECT_EQ(fresh.lrs()[0], before);
  expect_error([&] { fresh.opt.step(); }, {"SGD", "invalid learning rate", "-0.14"});
}

// --- state for resuming -------------------------------------------------------------------------

TEST(SchedulerState, SequentialLRRoundTripResumesMidSchedule) {
  TwoGroups a, b;
  auto make = [](TwoGroups& run) {
    auto warm = std::make_shared<optim::LinearLR>(run.opt, 0.25, 1.0, 4);
    auto cosine = std::make_shared<optim::CosineAnnealingLR>(run.opt, 10);
    return std::make_unique<optim::SequentialLR>(
        run.opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cosine}, std::vector<int64_t>{4});
  };
  auto sa = make(a), sb = make(b);
  for (int i = 0; i < 7; ++i) sa->step();
  StateDict state = sa->state_dict();
  // Saved as safetensors and read back, as a checkpoint would be.
  const std::string path = ::testing::TempDir() + "tapegrad_sched_state.safetensors";
  save_safetensors(path, state);
  sb->load_state_dict(load_safetensors(path));
  std::remove(path.c_str());
  EXPECT_EQ(sb->last_epoch(), 7);
  EXPECT_EQ(b.lrs(), a.lrs());
  for (int i = 0; i < 10; ++i) {
    sa->step();
    sb->step();
    EXPECT_EQ(b.lrs(), a.lrs()) << "step " << i;
  }
}

TEST(SchedulerState, OneCycleRoundTripRestoresLrAndMomentum) {
  TwoGroups a, b;
  optim::OneCycleLR sa(a.opt, 1.0, 30), sb(b.opt, 1.0, 30);
  for (int i = 0; i < 12; ++i) sa.step();
  sb.load_state_dict(sa.state_dict());
  EXPECT_EQ(b.lrs(), a.lrs());
  EXPECT_EQ(b.opt.param_groups()[1].momentum(), a.opt.param_groups()[1].momentum());
  // Beyond the schedule: refused, nothing changes.
  StateDict past{{"last_epoch", full({}, 31.0, kFloat64)}, {"base_lrs", tensor<double>({0.04, 0.04})}};
  expect_error([&] { sb.load_state_dict(past); }, {"OneCycleLR", "31", "total_steps is 30"});
  EXPECT_EQ(sb.last_epoch(), 12);
  EXPECT_EQ(b.lrs(), a.lrs());
}

TEST(SchedulerState, ReduceLROnPlateauRoundTripContinuesIdentically) {
  TwoGroups a, b;
  const auto options = optim::ReduceLROnPlateauOptions().patience(2).cooldown(2);
  optim::ReduceLROnPlateau sa(a.opt, options), sb(b.opt, options);
  const std::vector<double> metrics{3, 2, 2.5, 2.5, 2.5, 2.4, 2.6, 2.6, 1, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < 6; ++i) sa.step(metrics[i]);
  EXPECT_GT(sa.cooldown_counter() + sa.num_bad_epochs(), 0);
  // The lrs travel in the optimiser's state dict, the counters in the scheduler's.
  b.opt.load_state_dict(a.opt.state_dict());
  sb.load_state_dict(sa.state_dict());
  EXPECT_EQ(sb.best(), 2.0);
  EXPECT_EQ(sb.num_bad_epochs(), sa.num_bad_epochs());
  EXPECT_EQ(sb.cooldown_counter(), sa.cooldown_counter());
  EXPECT_EQ(sb.last_epoch(), 6);
  for (size_t i = 6; i < metrics.size(); ++i) {
    sa.step(metrics[i]);
    sb.step(metrics[i]);
    EXPECT_EQ(b.lrs(), a.lrs()) << "epoch " << i + 1;
  }
  // Negative control: without the loaded state the scheduler would not know the best metric.
  TwoGroups c;
  optim::ReduceLROnPlateau fresh(c.opt, options);
  fresh.step(5.0);
  EXPECT_EQ(fresh.best(), 5.0);
  EXPECT_EQ(sb.best(), 1.0);
}

// A state dict saved before schedulers chained has no "last_lr": it still loads, with the closed
// form of its epoch (base * 0.5^floor(5 / 2)), and stepping then chains from there.
TEST(SchedulerState, OldStateDictWithoutLastLrStillLoads) {
  TwoGroups run;
  optim::StepLR sched(run.opt, 2, 0.5);
  sched.load_state_dict({{"last_epoch", full({}, 5.0, kFloat64)}, {"base_lrs", tensor<double>({0.1, 0.02})}});
  EXPECT_EQ(sched.last_epoch(), 5);
  EXPECT_NEAR(run.lrs()[0], 0.025, 1e-17);
  EXPECT_NEAR(run.lrs()[1], 0.005, 1e-17);
  sched.step();  // epoch 6: * 0.5
  EXPECT_NEAR(run.lrs()[0], 0.0125, 1e-17);
  // The new format round-trips what the scheduler last set, after another scheduler changed it.
  TwoGroups other;
  optim::StepLR again(other.opt, 2, 0.5);
  again.load_state_dict(sched.state_dict());
  EXPECT_EQ(other.lrs(), run.lrs());
  EXPECT_EQ(again.get_last_lr(), sched.get_last_lr());
}

TEST(SchedulerState, BadStateDictsAreErrors) {
  TwoGroups run;
  optim::StepLR sched(run.opt, 2);
  expect_error(
      [&] {
        sched.load_state_dict({{"last_epoch", full({}, 2.5, kFloat64)}, {"base_lrs", tensor<double>({0.1, 0.02})}});
      },
      {"StepLR.load_state_dict", "'last_epoch'", "2.5"});
  expect_error([&] { sched.load_state_dict({{"last_epoch", full({}, 2.0, kFloat64)}}); }, {"'base_lrs' is missing"});
  expect_error(
      [&] {
        sched.load_state_dict({{"last_epoch", full({}, 2.0, kFloat64)}, {"base_lrs", tensor<double>({0.1})}});
      },
      {"'base_lrs'", "should hold 2"});
  expect_error([&] { sched.load_state_dict({{"epoch", full({}, 2.0, kFloat64)}}); }, {"unexpected key 'epoch'"});
  optim::ReduceLROnPlateau plateau(run.opt);
  expect_error(
      [&] {
        plateau.load_state_dict({{"last_epoch", full({}, -1.0, kFloat64)}});
      },
      {"ReduceLROnPlateau.load_state_dict", "'last_epoch'"});
}

}  // namespace
}  // namespace tapegrad
