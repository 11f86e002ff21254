// Parameter groups (torch.optim's param_groups): per-group options with the optimiser's defaults
// for the rest, add_param_group, lr access for schedulers, groups kept apart in the multi-tensor
// path, and state dicts that carry the groups' options and refuse another group layout.
#include <cmath>
#include <functional>
#include <memory>

#include "support/optim_reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;

std::vector<double> grad_at(int k, size_t n) {
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.5 - 0.1 * k + 0.7 * std::cos(static_cast<double>(i + 3 * k));
  return g;
}

// PyTorch's SGD and Adam/AdamW rules in double (tests/support/optim_reference.h), for one parameter.
std::vector<double> sgd_ref(const std::vector<double>& p, double lr, double momentum, double dampening, double wd,
                            bool nesterov, int steps) {
  return testing::sgd_reference(p, {lr, momentum, dampening, wd, nesterov}, steps,
                                [n = p.size()](int k) { return grad_at(k, n); });
}

std::vector<double> adam_ref(const std::vector<double>& p, double lr, double b1, double b2, double eps, double wd,
                             bool decoupled, bool amsgrad, int steps) {
  return testing::adam_reference(p, {lr, b1, b2, eps, wd, decoupled, amsgrad}, steps,
                                 [n = p.size()](int k) { return grad_at(k, n); });
}

Tensor leaf_of(const std::vector<double>& v) {
  return tensor<double>(v).requires_grad_();
}

void run(optim::Optimizer& opt, const std::vector<Tensor>& params, int steps) {
  for (int k = 0; k < steps; ++k) {
    for (const Tensor& p : params) p.set_grad(tensor<double>(grad_at(k, static_cast<size_t>(p.numel()))));
    opt.step();
  }
}

const std::vector<double> kA{1.0, -2.0, 0.5}, kB{0.3, 0.7}, kC{-1.5, 2.5, 0.25, 4.0};

// Issue item 1: an empty parameter list was accepted and the optimiser trained nothing.
TEST(OptimizerEmptyList, EveryOptimiserRefusesAnEmptyParameterList) {
  const std::string msg = "optimizer got an empty parameter list";
  expect_error([] { optim::SGD(std::vector<Tensor>{}); }, {"SGD", msg});
  expect_error([] { optim::Adam(std::vector<Tensor>{}); }, {"Adam", msg});
  expect_error([] { optim::AdamW(std::vector<Tensor>{}); }, {"AdamW", msg});
  expect_error([] { optim::SGD(std::vector<optim::ParamGroup>{}); }, {"SGD", msg});
  expect_error([] { optim::Adam(std::vector<optim::ParamGroup>{}); }, {"Adam", msg});
  expect_error([] { optim::AdamW(std::vector<optim::ParamGroup>{}); }, {"AdamW", msg});
  // Negative control: one parameter is enough.
  Tensor p = zeros({1}).requires_grad_();
  EXPECT_NO_THROW(optim::SGD({p}));
}

TEST(ParamGroups, SgdGroupsUseTheirOwnOptionsAndTheDefaultsForTheRest) {
  Tensor a = leaf_of(kA), b = leaf_of(kB), c = leaf_of(kC);
  optim::SGD opt({optim::ParamGroup({a}), optim::ParamGroup({b}).lr(0.3).momentum(0.5).dampening(0.2),
                  optim::ParamGroup({c}).weight_decay(0.1).nesterov(true)},
                 optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-2));
  ASSERT_EQ(opt.param_groups().size(), 3u);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.3);
  EXPECT_EQ(opt.param_groups()[1].weight_decay(), 1e-2);  // from the defaults
  EXPECT_EQ(opt.param_groups()[2].momentum(), 0.9);
  EXPECT_FALSE(opt.param_groups()[0].has("beta1"));
  run(opt, {a, b, c}, 6);
  expect_close(a, sgd_ref(kA, 0.05, 0.9, 0, 1e-2, false, 6), 1e-13);
  expect_close(b, sgd_ref(kB, 0.3, 0.5, 0.2, 1e-2, false, 6), 1e-13);
  expect_close(c, sgd_ref(kC, 0.05, 0.9, 0, 0.1, true, 6), 1e-13);
}

TEST(ParamGroups, AdamAndAdamWGroupsUseTheirOwnOptions) {
  for (bool decoupled : {false, true}) {
    Tensor a = leaf_of(kA), b = leaf_of(kB), c = leaf_of(kC);
    std::vector<optim::ParamGroup> groups{optim::ParamGroup({a}), optim::ParamGroup({b}).betas(0.8, 0.99).eps(1e-6),
                                          optim::ParamGroup({c}).lr(3e-2).weight_decay(0.2).amsgrad(true)};
    const optim::AdamOptions defaults = optim::AdamOptions(1e-2).weight_decay(0.05);
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<optim::AdamW>(groups, defaults);
    else
      opt = std::make_unique<optim::Adam>(groups, defaults);
    run(*opt, {a, b, c}, 7);
    expect_close(a, adam_ref(kA, 1e-2, 0.9, 0.999, 1e-8, 0.05, decoupled, false, 7), 1e-12);
    expect_close(b, adam_ref(kB, 1e-2, 0.8, 0.99, 1e-6, 0.05, decoupled, false, 7), 1e-12);
    expect_close(c, adam_ref(kC, 3e-2, 0.9, 0.999, 1e-8, 0.2, decoupled, true, 7), 1e-12);
  }
}

// Multi-tensor path: parameters of one device and dtype but different groups must not share a
// launch with one group's values. Many parameters per group, so a fused launch would be the
// natural mistake; the per-group references catch it (and foreach on/off must agree bit for bit).
TEST(ParamGroups, ForeachKeepsGroupsWithDifferentOptionsApart) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>, bool)>;
  const std::vector<std::pair<const char*, Make>> makers{
      {"sgd",
       [](std::vector<optim::ParamGroup> g, bool f) -> std::unique_ptr<optim::Optimizer> {
         g[1].lr(0.2).momentum(0.5);
         return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions(0.05).momentum(0.9).foreach (f));
       }},
      {"adam",
       [](std::vector<optim::ParamGroup> g, bool f) -> std::unique_ptr<optim::Optimizer> {
         g[1].lr(3e-2).betas(0.5, 0.9);
         return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions(1e-2).foreach (f));
       }},
      {"adamw amsgrad in one group",
       [](std::vector<optim::ParamGroup> g, bool f) -> std::unique_ptr<optim::Optimizer> {
         g[1].amsgrad(true).weight_decay(0.3);
         return std::make_unique<optim::AdamW>(std::move(g), optim::AdamOptions(1e-2).foreach (f));
       }},
      {"equal options in two groups",
       [](std::vector<optim::ParamGroup> g, bool f) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions(1e-2).foreach (f));
       }}};
  for (const auto& [name, make] : makers) {
    std::vector<Tensor> fused, single;
    Generator gen(3);
    for (int i = 0; i < 6; ++i) {
      Tensor t = randn({3 + i, 5}, kFloat32, &gen);
      fused.push_back(t.clone().requires_grad_());
      single.push_back(t.clone().requires_grad_());
    }
    auto split = [](const std::vector<Tensor>& p) {
      return std::vector<optim::ParamGroup>{optim::ParamGroup({p[0], p[1], p[2]}),
                                            optim::ParamGroup({p[3], p[4], p[5]})};
    };
    auto opt_fused = make(split(fused), true);
    auto opt_single = make(split(single), false);
    // Reference: each group alone in its own optimiser, per-parameter path.
    std::vector<Tensor> alone;
    for (const Tensor& t : fused) alone.push_back(t.detach().clone().requires_grad_());
    auto first = make({optim::ParamGroup({alone[0], alone[1], alone[2]}), optim::ParamGroup({alone[3]})}, false);
    auto second = make({optim::ParamGroup({alone[5]}), optim::ParamGroup({alone[4]})}, false);
    for (int k = 0; k < 4; ++k) {
      Generator g(100 + k);
      for (size_t i = 0; i < fused.size(); ++i) {
        Tensor grad = randn(fused[i].sizes(), kFloat32, &g);
        fused[i].set_grad(grad.clone());
        single[i].set_grad(grad.clone());
        alone[i].set_grad(grad.clone());
      }
      alone[5].set_grad(Tensor());  // group 0 of `second` only ever updates nothing
      opt_fused->step();
      opt_single->step();
      first->step();
      second->step();
    }
    for (size_t i = 0; i < fused.size(); ++i) {
      EXPECT_EQ(testing::values(fused[i].detach()), testing::values(single[i].detach())) << name << " parameter " << i;
      if (i < 5) EXPECT_EQ(testing::values(fused[i].detach()), testing::values(alone[i].detach())) << name << " " << i;
    }
  }
}

TEST(ParamGroups, AddParamGroupAndDuplicatesAcrossGroups) {
  Tensor a = leaf_of(kA), b = leaf_of(kB), c = leaf_of(kC);
  optim::SGD opt({a, b}, optim::SGDOptions(0.1));
  opt.add_param_group(optim::ParamGroup({c}).lr(0.01));
  ASSERT_EQ(opt.param_groups().size(), 2u);
  ASSERT_EQ(opt.params().size(), 3u);
  EXPECT_EQ(opt.param_groups()[1].momentum(), 0.0);
  run(opt, {a, b, c}, 3);
  expect_close(c, sgd_ref(kC, 0.01, 0, 0, 0, false, 3), 1e-14);
  expect_close(a, sgd_ref(kA, 0.1, 0, 0, 0, false, 3), 1e-14);

  expect_error([&] { opt.add_param_group(optim::ParamGroup({b})); },
               {"SGD", "parameter group 2", "parameter 0", "already in another parameter group"});
  expect_error(
      [&] {
        optim::Adam({optim::ParamGroup({a, b}), optim::ParamGroup({c, a})});
      },
      {"Adam", "parameter group 1", "parameter 1", "already in another parameter group"});
  expect_error(
      [&] {
        optim::Adam({optim::ParamGroup({a}), optim::ParamGroup({c, b, c})});
      },
      {"parameter group 1", "parameter 2", "more than once"});
  expect_error([&] { optim::SGD({optim::ParamGroup({a}).betas(0.9, 0.99)}); }, {"SGD", "beta1", "does not have"});
  expect_error([&] { optim::Adam({optim::ParamGroup({a}).momentum(0.9)}); }, {"Adam", "momentum", "does not have"});
  expect_error([&] { optim::SGD({optim::ParamGroup({a}).lr(-1.0)}); },
               {"SGD", "parameter group 0", "learning rate", "-1"});
  expect_error(
      [&] {
        optim::SGD({optim::ParamGroup({a}), optim::ParamGroup({b}).nesterov(true)});
      },
      {"parameter group 1", "nesterov"});
  expect_error([&] { optim::Adam({optim::ParamGroup({a}).betas(0.9, 1.0)}); }, {"Adam", "betas"});
  // A failed add leaves the optimiser as it was.
  EXPECT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.params().size(), 3u);
  expect_error([&] { opt.param_groups()[2]; }, {"param_groups", "index 2"});
}

TEST(ParamGroups, LrAccessorsAndSetLrActOnEveryGroup) {
  Tensor a = leaf_of(kA), b = leaf_of(kB);
  optim::Adam opt({optim::ParamGroup({a}), optim::ParamGroup({b}).lr(0.5)}, optim::AdamOptions(0.1));
  EXPECT_EQ(opt.lr(), 0.1);  // the first group's
  for (optim::ParamGroup& g : opt.param_groups()) g.lr(g.lr() * 2);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.2);
  EXPECT_EQ(opt.param_groups()[1].lr(), 1.0);
  opt.set_lr(0.05);
  for (const optim::ParamGroup& g : opt.param_groups()) EXPECT_EQ(g.lr(), 0.05);
  expect_error([&] { opt.set_lr(-0.1); }, {"Adam", "learning rate", "-0.1"});
  expect_error([&] { opt.param_groups()[0].momentum(); }, {"ParamGroup", "momentum", "not set"});
  expect_error([&] { opt.param_groups()[0].get("lrr"); }, {"ParamGroup", "unknown option 'lrr'"});
}

// An option broken after construction (by hand or by a scheduler) is refused at the next step,
// before any parameter moves.
TEST(ParamGroups, InvalidOptionSetLaterIsAnErrorBeforeAnyUpdate) {
  Tensor a = leaf_of(kA), b = leaf_of(kB);
  optim::SGD opt({optim::ParamGroup({a}), optim::ParamGroup({b})}, optim::SGDOptions(0.1));
  opt.param_groups()[1].lr(std::nan(""));
  a.set_grad(ones({3}, kFloat64));
  b.set_grad(ones({2}, kFloat64));
  expect_error([&] { opt.step(); }, {"SGD", "parameter group 1", "learning rate", "nan"});
  expect_close(a, kA, 0);
  opt.param_groups()[1].lr(0.1).nesterov(true);
  expect_error([&] { opt.step(); }, {"parameter group 1", "nesterov"});
}

// Turning momentum on later starts the buffer from the gradient, as a first step does.
TEST(ParamGroups, MomentumSwitchedOnLaterStartsItsBuffer) {
  Tensor a = leaf_of(kA);
  optim::SGD opt({a}, optim::SGDOptions(0.1));
  run(opt, {a}, 1);
  opt.param_groups()[0].momentum(0.9);
  for (int k = 1; k < 4; ++k) {
    a.set_grad(tensor<double>(grad_at(k, 3)));
    opt.step();
  }
  std::vector<double> p = sgd_ref(kA, 0.1, 0, 0, 0, false, 1), buf(3);
  for (int k = 1; k < 4; ++k) {
    std::vector<double> g = grad_at(k, 3);
    for (size_t i = 0; i < 3; ++i) {
      buf[i] = k == 1 ? g[i] : 0.9 * buf[i] + g[i];
      p[i] -= 0.1 * buf[i];
    }
  }
  expect_close(a, p, 1e-14);
}

TEST(ParamGroupsStateDict, RoundTripRestoresGroupsOptionsAndContinuesIdentically) {
  auto make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(
        std::vector<optim::ParamGroup>{optim::ParamGroup({p[0], p[1]}),
                                       optim::ParamGroup({p[2]}).lr(5e-2).amsgrad(true)},
        optim::AdamOptions(1e-2));
  };
  std::vector<Tensor> a{leaf_of(kA), leaf_of(kB), leaf_of(kC)}, b{leaf_of(kA), leaf_of(kB), leaf_of(kC)};
  auto first = make(a), second = make(b);
  run(*first, a, 3);
  first->param_groups()[0].lr(2e-3);  // as a scheduler would
  first->param_groups()[1].betas(0.7, 0.95);
  StateDict state = first->state_dict();
  bool saw_lr = false;
  for (const auto& [key, t] : state) {
    if (key == "param_groups.0.lr") {
      saw_lr = true;
      EXPECT_EQ(t.item(), 2e-3);
    }
    if (key == "param_groups.1.params") EXPECT_EQ(testing::values(t), std::vector<double>{2});
  }
  EXPECT_TRUE(saw_lr);
  for (size_t i = 0; i < a.size(); ++i) b[i].set_data(a[i].detach().clone());
  second->load_state_dict(state);
  EXPECT_EQ(second->param_groups()[0].lr(), 2e-3);
  EXPECT_EQ(second->param_groups()[1].betas().first, 0.7);
  EXPECT_TRUE(second->param_groups()[1].amsgrad());
  for (int k = 3; k < 6; ++k) {
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].set_grad(tensor<double>(grad_at(k, static_cast<size_t>(a[i].numel()))));
      b[i].set_grad(tensor<double>(grad_at(k, static_cast<size_t>(b[i].numel()))));
    }
    first->step();
    second->step();
  }
  for (size_t i = 0; i < a.size(); ++i) expect_close(b[i], testing::values(a[i]), 0);
}

TEST(ParamGroupsStateDict, SgdRoundTripKeepsInitialLr) {
  Tensor a = leaf_of(kA), b = leaf_of(kB);
  optim::SGD first({optim::ParamGroup({a}), optim::ParamGroup({b}).momentum(0.9)}, optim::SGDOptions(0.1));
  first.param_groups()[1].initial_lr(0.7);
  optim::SGD second({optim::ParamGroup({leaf_of(kA)}), optim::ParamGroup({leaf_of(kB)})}, optim::SGDOptions(0.3));
  second.load_state_dict(first.state_dict());
  EXPECT_EQ(second.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(second.param_groups()[1].momentum(), 0.9);
  EXPECT_FALSE(second.param_groups()[0].has("initial_lr"));
  EXPECT_EQ(second.param_groups()[1].initial_lr(), 0.7);
}

TEST(ParamGroupsStateDict, AnotherGroupLayoutIsAClearErrorAndChangesNothing) {
  Tensor a = leaf_of(kA), b = leaf_of(kB), c = leaf_of(kC);
  optim::Adam two({optim::ParamGroup({a, b}), optim::ParamGroup({c})});
  run(two, {a, b, c}, 1);
  const StateDict saved = two.state_dict();

  optim::Adam one({leaf_of(kA), leaf_of(kB), leaf_of(kC)}, optim::AdamOptions(0.5));
  expect_error([&] { one.load_state_dict(saved); },
               {"Adam.load_state_dict", "parameter group 1", "1 parameter groups"});
  EXPECT_EQ(one.lr(), 0.5);
  EXPECT_TRUE(one.state_dict().size() == 7u) << "nothing loaded: only the group entries";

  optim::Adam split_differently({optim::ParamGroup({leaf_of(kA)}), optim::ParamGroup({leaf_of(kB), leaf_of(kC)})});
  expect_error([&] { split_differently.load_state_dict(saved); },
               {"Adam.load_state_dict", "parameter group 0", "holds 2 parameters in the state dict", "here 1"});

  optim::Adam three(
      {optim::ParamGroup({leaf_of(kA)}), optim::ParamGroup({leaf_of(kB)}), optim::ParamGroup({leaf_of(kC)})});
  expect_error([&] { three.load_state_dict(saved); },
               {"Adam.load_state_dict", "2 parameter groups", "this optimiser 3"});

  // Missing, unknown and invalid group entries.
  optim::Adam same({optim::ParamGroup({leaf_of(kA), leaf_of(kB)}), optim::ParamGroup({leaf_of(kC)})});
  auto without = [&](const std::string& key) {
    StateDict s;
    for (const auto& e : saved)
      if (e.first != key) s.push_back(e);
    return s;
  };
  expect_error([&] { same.load_state_dict(without("param_groups.1.eps")); }, {"'param_groups.1.eps' is missing"});
  expect_error([&] { same.load_state_dict(without("param_groups.0.params")); }, {"'param_groups.0.params' is missing"});
  StateDict extra = saved;
  extra.emplace_back("param_groups.0.momentum", full({}, 0.9, kFloat64));
  expect_error([&] { same.load_state_dict(extra); }, {"unexpected key 'param_groups.0.momentum'"});
  StateDict bad = without("param_groups.1.beta1");
  bad.emplace_back("param_groups.1.beta1", full({}, 1.5, kFloat64));
  expect_error([&] { same.load_state_dict(bad); }, {"Adam.load_state_dict", "parameter group 1", "betas"});
  StateDict bad_bool = without("param_groups.0.amsgrad");
  bad_bool.emplace_back("param_groups.0.amsgrad", full({}, 0.5, kFloat64));
  expect_error([&] { same.load_state_dict(bad_bool); }, {"'param_groups.0.amsgrad' holds 0.5"});
  StateDict bad_key = saved;
  bad_key.emplace_back("param_groups.x.lr", full({}, 0.1, kFloat64));
  expect_error([&] { same.load_state_dict(bad_key); }, {"unexpected key 'param_groups.x.lr'"});
  // Negative control: the unmodified state dict loads.
  EXPECT_NO_THROW(same.load_state_dict(saved));
}

// A state dict written before groups existed (per-parameter entries only) still loads, keeping the
// current options.
TEST(ParamGroupsStateDict, StateDictWithoutGroupEntriesKeepsTheCurrentOptions) {
  Tensor a = leaf_of(kA);
  optim::SGD first({a}, optim::SGDOptions(0.1).momentum(0.9));
  run(first, {a}, 2);
  StateDict legacy;
  for (const auto& e : first.state_dict())
    if (e.first.rfind("param_groups.", 0) != 0) legacy.push_back(e);
  ASSERT_EQ(legacy.size(), 1u);
  optim::SGD second({leaf_of(kA)}, optim::SGDOptions(0.2).momentum(0.5));
  second.load_state_dict(legacy);
  EXPECT_EQ(second.lr(), 0.2);
  EXPECT_EQ(second.param_groups()[0].momentum(), 0.5);
}

}  // namespace
}  // namespace tapegrad
