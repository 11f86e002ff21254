// amp::GradScaler against PyTorch's torch.cuda.amp.GradScaler: the update rule over long sequences
// (a double-precision reference of _amp_update_scale_, written here), unscaled values in every
// floating dtype, skipped steps, the call-order errors, clipping after unscale_, the state dict,
// the disabled pass-through, bad arguments, and the fused kernel itself with its negative controls.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "support/test_util.h"
#include "tapegrad/amp/grad_scaler.h"

namespace tapegrad {
namespace {

using amp::GradScaler;
using testing::expect_error;
using testing::values;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// PyTorch's _amp_update_scale_ in double, the scale stored in float32 after each change (as the
// scale tensor is float32).
struct ReferenceScaler {
  double scale, growth, backoff;
  int64_t interval, tracker = 0;
  void update(bool found_inf) {
    if (found_inf) {
      scale = static_cast<float>(scale * backoff);
      tracker = 0;
      return;
    }
    if (tracker + 1 == interval) {
      const float grown = static_cast<float>(scale * growth);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      tracker += 1;
    }
  }
};

// A deterministic pattern of bad steps: bursts and isolated ones, long enough runs of good steps
// for several growths.
bool bad_step(int step) {
  return step % 37 == 5 || step % 53 == 17 || (step >= 120 && step < 124) || step % 101 == 100;
}

// One training step of loss = sum(w * x) through the scaler, with an inf or NaN planted in x on
// bad steps. Returns whether the optimiser stepped.
bool train_step(GradScaler& scaler, optim::Optimizer& opt, const Tensor& w, const Tensor& x) {
  opt.zero_grad();
  scaler.scale(sum(mul(w, x))).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

void run_sequence(double init, double growth, double backoff, int64_t interval, int steps) {
  SCOPED_TRACE("growth " + std::to_string(growth) + ", backoff " + std::to_string(backoff) + ", interval " +
               std::to_string(interval));
  GradScaler scaler(init, growth, backoff, interval);
  ReferenceScaler ref{init, growth, backoff, interval};
  Tensor w = tensor<double>({0.5, -1.0, 2.0}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.25));
  std::vector<double> expected_w = values(w);
  int skipped = 0, grew = 0, backed_off = 0;
  for (int step = 0; step < steps; ++step) {
    const bool bad = bad_step(step);
    std::vector<double> xs = {1.0 + step % 3, -0.5, 0.25};
    if (bad) xs[step % 3] = step % 2 ? kInf : kNaN;
    const double before = ref.scale;
    const bool stepped = train_step(scaler, opt, w, tensor<double>(xs));
    EXPECT_EQ(stepped, !bad) << "step " << step;
    if (!bad)
      for (size_t i = 0; i < 3; ++i) expected_w[i] -= 0.25 * xs[i];
    ref.update(bad);
    skipped += bad;
    grew += ref.scale > before;
    backed_off += ref.scale < before;
    ASSERT_EQ(scaler.get_scale(), ref.scale) << "step " << step;
    ASSERT_EQ(scaler.get_growth_tracker(), ref.tracker) << "step " << step;
  }
  // Power-of-two scales unscale exactly, so the parameters follow plain SGD on the good steps.
  if (std::log2(init) == std::floor(std::log2(init)) && growth == 2.0 && backoff == 0.5)
    EXPECT_EQ(values(w), expected_w);
  EXPECT_GT(skipped, 10);
  EXPECT_GT(grew, 3);
  EXPECT_GT(backed_off, 10);
}

TEST(GradScaler, SkipGrowthAndBackoffFollowPyTorchsRule) {
  run_sequence(65536.0, 2.0, 0.5, 4, 400);
  run_sequence(1024.0, 2.0, 0.5, 1, 200);
  run_sequence(3.0, 3.0, 0.7, 5, 400);  // scales that round in float32
  run_sequence(100.0, 1.5, 0.25, 9, 400);
}

TEST(GradScaler, GrowthStopsAtFloat32Range) {
  GradScaler scaler(std::ldexp(1.0, 126), 2.0, 0.5, 1);
  Tensor w = tensor<double>({1.0}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.0));
  const Tensor x = tensor<double>({1e-300});  // the scaled gradient stays finite in double
  train_step(scaler, opt, w, x);
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 127));
  train_step(scaler, opt, w, x);  // 2^128 overflows float32: the scale stays, the tracker resets
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
}

TEST(GradScaler, ScaleMultipliesAndIsDifferentiable) {
  GradScaler scaler(8.0);
  Tensor w = tensor<float>({1.0f, 2.0f}).requires_grad_(true);
  Tensor loss = sum(mul(w, 3.0));
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.dtype(), kFloat32);
  EXPECT_EQ(scaled.item(), 72.0);
  scaled.backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{24.0, 24.0}));
  std::vector<Tensor> two = scaler.scale(std::vector<Tensor>{loss.detach(), tensor<double>({1.0, -2.0})});
  EXPECT_EQ(two[0].item(), 72.0);
  EXPECT_EQ(two[1].dtype(), kFloat64);
  EXPECT_EQ(values(two[1]), (std::vector<double>{8.0, -16.0}));
}

// Gradients of every floating dtype, set by hand, divided by a scale that is not a power of two.
TEST(GradScaler, UnscaleValuesInEveryDtype) {
  const double init = 3.0;
  const float inv = static_cast<float>(1.0 / init);
  const std::vector<double> g = {3.0, -1.5, 6e4, 1e-3, 0.0, -7.25};
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor p = zeros({2, 3}, TensorOptions(dtype)).requires_grad_(true);
    Tensor grad = tensor<double>(g, {2, 3}).to(dtype);
    const std::vector<double> stored = values(grad);  // g rounded to dtype
    p.set_grad(grad);
    optim::SGD opt({p});
    GradScaler scaler(init);
    scaler.scale(tensor<float>({1.0f}));
    scaler.unscale_(opt);
    std::vector<double> expected;
    for (double v : stored) {
      if (dtype == kFloat64) {
        expected.push_back(v * static_cast<double>(inv));
      } else {  // computed in float, stored in dtype
        const float f = static_cast<float>(v) * inv;
        expected.push_back(values(tensor<float>({f}).to(dtype))[0]);
      }
    }
    EXPECT_EQ(values(p.grad()), expected);
    EXPECT_EQ(p.grad().dtype(), dtype);
  }
}

// Five parameters; only the last one's gradient goes bad. The step is skipped and nothing moves,
// including the optimiser state; then the scale backs off. The negative control: the same with
// finite gradients steps.
TEST(GradScaler, InfOrNanInALateParameterSkipsTheStep) {
  for (double bad : {kInf, -kInf, kNaN, 0.0}) {
    SCOPED_TRACE(bad);
    std::vector<Tensor> params;
    for (int i = 0; i < 5; ++i) params.push_back(full({4}, 1.0 + i, TensorOptions(kFloat32)).requires_grad_(true));
    optim::Adam opt(params, optim::AdamOptions(0.1));
    GradScaler scaler(1024.0);
    Tensor loss = zeros({}, TensorOptions(kFloat32));
    for (int i = 0; i < 5; ++i) loss = add(loss, sum(mul(params[i], 0.5)));
    scaler.scale(loss).backward();
    if (bad != 0.0) {
      Tensor g = params[4].grad();
      g.copy_(tensor<float>({512.0f, 512.0f, static_cast<float>(bad), 512.0f}));
    }
    const bool stepped = scaler.step(opt);
    EXPECT_EQ(stepped, bad == 0.0);
    for (int i = 0; i < 5; ++i) {
      const double start = 1.0 + i;
      if (bad != 0.0)
        EXPECT_EQ(values(params[i]), std::vector<double>(4, start)) << "parameter " << i;
      else
        EXPECT_NE(values(params[i]), std::vector<double>(4, start)) << "parameter " << i;
    }
    // The finite gradients were unscaled whatever happened.
    EXPECT_EQ(values(params[0].grad()), std::vector<double>(4, 0.5));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), bad != 0.0 ? 512.0 : 1024.0);
    bool has_moments = false;
    for (const auto& entry : opt.state_dict()) has_moments = has_moments || entry.first == "0.exp_avg";
    EXPECT_EQ(has_moments, bad == 0.0);
  }
}

TEST(GradScaler, CallOrderErrors) {
  Tensor w = tensor<float>({1.0f}).requires_grad_(true);
  optim::SGD opt({w});
  GradScaler scaler;
  expect_error([&] { scaler.unscale_(opt); }, {"GradScaler::unscale_", "scaler.scale(loss)"});
  expect_error([&] { scaler.update(); }, {"GradScaler::update", "scale"});
  scaler.scale(sum(w)).backward();
  scaler.unscale_(opt);
  expect_error(
      [&] { scaler.unscale_(opt); },
      {"GradScaler::unscale_", "unscale_() has already been called on this optimizer since the last update()"});
  scaler.step(opt);
  expect_error([&] { scaler.unscale_(opt); }, {"unscale_() is being called after step()"});
  expect_error([&] { scaler.step(opt); },
               {"GradScaler::step", "step() has already been called since the last update()"});
  scaler.update();
  expect_error([&] { scaler.update(); }, {"GradScaler::update", "no inf checks were recorded"});
  // After update() the cycle starts again.
  scaler.scale(sum(w)).backward();
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  // An optimiser none of whose parameters has a gradient.
  Tensor unused = tensor<float>({1.0f}).requires_grad_(true);
  optim::SGD other({unused});
  expect_error([&] { scaler.step(other); }, {"GradScaler::step", "no inf checks were recorded for this optimizer"});
  Tensor i = tensor<int64_t>({1});
  expect_error([&] { scaler.scale(i); }, {"GradScaler::scale", "floating-point", "int64"});
  expect_error([&] { scaler.update(0.0); }, {"GradScaler::update", "> 0", "0"});
}

// clip_grad_norm_ after unscale_ sees the gradients of the unscaled loss: the same norm and the
// same clipped gradients as a run without scaling.
TEST(GradScaler, ClippingAfterUnscaleSeesTrueGradients) {
  auto run = [](bool scaled) {
    Tensor w = tensor<double>({3.0, -4.0, 12.0}).requires_grad_(true);
    optim::SGD opt({w}, optim::SGDOptions(1.0));
    GradScaler scaler(65536.0, 2.0, 0.5, 2000, scaled);
    Tensor loss = sum(mul(w, w));  // gradient 2w, norm 26
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    Tensor norm = nn::utils::clip_grad_norm_({w}, 13.0);
    scaler.step(opt);
    scaler.update();
    return std::make_pair(norm.item(), values(w));
  };
  auto with = run(true), without = run(false);
  EXPECT_EQ(with.first, 26.0);
  EXPECT_EQ(with.first, without.first);
  EXPECT_EQ(with.second, without.second);
}

TEST(GradScaler, StateDictRoundTrip) {
  GradScaler a(256.0, 3.0, 0.25, 5);
  Tensor w = tensor<double>({1.0}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.0));
  for (int step = 0; step < 14; ++step) train_step(a, opt, w, tensor<double>({step == 2 ? kInf : 1.0}));
  const StateDict state = a.state_dict();
  ASSERT_EQ(state.size(), 5u);
  const std::vector<std::string> keys = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                                         "_growth_tracker"};
  const std::vector<DType> dtypes = {kFloat32, kFloat64, kFloat64, kInt64, kInt32};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(state[i].first, keys[i]);
    EXPECT_EQ(state[i].second.dtype(), dtypes[i]) << keys[i];
  }
  EXPECT_EQ(state[0].second.item(), a.get_scale());
  EXPECT_EQ(state[4].second.item(), static_cast<double>(a.get_growth_tracker()));
  EXPECT_NE(a.get_growth_tracker(), 0);

  GradScaler b;  // the defaults, all replaced
  b.load_state_dict(state);
  EXPECT_EQ(b.get_scale(), a.get_scale());
  EXPECT_EQ(b.get_growth_factor(), 3.0);
  EXPECT_EQ(b.get_backoff_factor(), 0.25);
  EXPECT_EQ(b.get_growth_interval(), 5);
  EXPECT_EQ(b.get_growth_tracker(), a.get_growth_tracker());
  // Both continue identically.
  for (int step = 0; step < 12; ++step) {
    const Tensor x = tensor<double>({step == 7 ? kNaN : 2.0});
    train_step(a, opt, w, x);
    train_step(b, opt, w, x);
    ASSERT_EQ(a.get_scale(), b.get_scale()) << step;
    ASSERT_EQ(a.get_growth_tracker(), b.get_growth_tracker()) << step;
  }

  // Bad state dicts change nothing.
  GradScaler c(64.0);
  expect_error([&] { c.load_state_dict({}); }, {"GradScaler::load_state_dict", "empty", "disabled"});
  StateDict missing(state.begin(), state.end() - 1);
  expect_error([&] { c.load_state_dict(missing); }, {"GradScaler::load_state_dict", "missing key", "_growth_tracker"});
  StateDict bad = state;
  bad[1].second = full({}, 0.5, TensorOptions(kFloat64));
  expect_error([&] { c.load_state_dict(bad); }, {"GradScaler::load_state_dict", "growth_factor", "0.5"});
  bad = state;
  bad[0].second = full({}, -1.0, TensorOptions(kFloat32));
  expect_error([&] { c.load_state_dict(bad); }, {"\"scale\"", "-1"});
  // A float64 "scale" beyond float32's range, and a growth_interval beyond int64's (converting it
  // was undefined behaviour).
  bad = state;
  bad[0].second = full({}, 1e39, TensorOptions(kFloat64));
  expect_error([&] { c.load_state_dict(bad); }, {"GradScaler::load_state_dict", "\"scale\"", "1e+39", "float32"});
  bad = state;
  bad[3].second = full({}, 1e30, TensorOptions(kFloat64));
  expect_error([&] { c.load_state_dict(bad); }, {"GradScaler::load_state_dict", "growth_interval", "1e+30"});
  bad[3].second = full({}, std::nan(""), TensorOptions(kFloat64));
  expect_error([&] { c.load_state_dict(bad); }, {"growth_interval", "nan"});
  EXPECT_EQ(c.get_scale(), 64.0);
  EXPECT_EQ(c.get_growth_factor(), 2.0);
  // The loaded scale is what scale() then multiplies by.
  c.load_state_dict(state);
  EXPECT_EQ(c.scale(tensor<float>({1.0f})).item(), state[0].second.item());
}

TEST(GradScaler, DisabledIsAPassThrough) {
  GradScaler scaler(65536.0, 0.5, 2.0, -1, /*enabled=*/false);  // bad values are not checked
  EXPECT_FALSE(scaler.is_enabled());
  Tensor w = tensor<double>({1.0, 2.0}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.5));
  Tensor loss = sum(mul(w, w));
  Tensor same = scaler.scale(loss);
  EXPECT_EQ(same.impl(), loss.impl());
  same.backward();
  scaler.unscale_(opt);
  scaler.unscale_(opt);  // no stage checks either
  EXPECT_EQ(values(w.grad()), (std::vector<double>{2.0, 4.0}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(values(w), (std::vector<double>{0.0, 0.0}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict({});  // ignored
  // A non-finite gradient does not stop a disabled scaler's step.
  w.set_grad(tensor<double>({kInf, 1.0}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_TRUE(std::isinf(values(w)[0]));
}

TEST(GradScaler, BadArgumentsAreClearErrors) {
  expect_error([] { GradScaler s(65536.0, 1.0); }, {"GradScaler", "growth_factor must be > 1", "1"});
  expect_error([] { GradScaler s(65536.0, 0.5); }, {"growth_factor", "0.5"});
  expect_error([] { GradScaler s(65536.0, 2.0, 1.0); }, {"GradScaler", "backoff_factor must be in (0, 1)", "1"});
  expect_error([] { GradScaler s(65536.0, 2.0, 0.0); }, {"backoff_factor", "0"});
  expect_error([] { GradScaler s(65536.0, 2.0, -0.5); }, {"backoff_factor", "-0.5"});
  expect_error([] { GradScaler s(65536.0, 2.0, 0.5, 0); }, {"GradScaler", "growth_interval must be a positive", "0"});
  expect_error([] { GradScaler s(65536.0, 2.0, 0.5, -3); }, {"growth_interval", "-3"});
  expect_error([] { GradScaler s(0.0); }, {"GradScaler", "init_scale must be finite and > 0", "0"});
  expect_error([] { GradScaler s(kInf); }, {"scale", "inf"});
  expect_error([] { GradScaler s(65536.0, kNaN); }, {"growth_factor", "nan"});
  // Finite doubles the float32 scale cannot hold: stored as inf (every step skipped forever) or 0.
  expect_error([] { GradScaler s(1e39); }, {"GradScaler", "init_scale", "1e+39", "not representable in float32"});
  expect_error([] { GradScaler s(1e-46); }, {"GradScaler", "init_scale", "1e-46", "float32"});
  EXPECT_EQ(GradScaler(3.4e38).get_scale(), static_cast<double>(3.4e38f));  // the largest kind still works
  GradScaler ok;
  ok.scale(tensor<float>({1.0f}));
  expect_error([&] { ok.update(1e300); }, {"GradScaler::update", "new_scale", "float32"});
  expect_error([&] { ok.set_growth_factor(0.9); }, {"GradScaler::set_growth_factor", "0.9"});
  expect_error([&] { ok.set_backoff_factor(1.5); }, {"GradScaler::set_backoff_factor", "1.5"});
  expect_error([&] { ok.set_growth_interval(0); }, {"GradScaler::set_growth_interval", "0"});
}

// The kernel itself, on gradients large enough to be split across threads, one inf planted late.
TEST(GradScalerKernel, OnePassOverManyTensorsFindsALateInf) {
  auto kernel = backend::kernels(kCPU).non_finite_check_and_unscale;
  ASSERT_NE(kernel, nullptr);
  std::vector<Tensor> grads;
  for (int64_t n : {70000, 0, 3, 150000, 1, 90001}) grads.push_back(full({n}, 4.0, TensorOptions(kFloat32)));
  grads.push_back(full({1000}, 4.0, TensorOptions(kFloat64)));
  grads.push_back(full({1000}, 4.0, TensorOptions(kBFloat16)));
  Tensor inv = full({}, 0.25, TensorOptions(kFloat32));
  // Negative control: all finite, the flag stays 0 and every value is unscaled.
  Tensor found = zeros({}, TensorOptions(kFloat32));
  kernel(grads, found, inv);
  EXPECT_EQ(found.item(), 0.0);
  for (const Tensor& g : grads)
    if (g.numel() > 0) EXPECT_EQ(values(g), std::vector<double>(static_cast<size_t>(g.numel()), 1.0));
  // One NaN near the end of the largest tensor, one element before a chunk boundary.
  static_cast<float*>(grads[5].data_ptr())[89999] = std::numeric_limits<float>::quiet_NaN();
  kernel(grads, found, inv);
  EXPECT_EQ(found.item(), 1.0);
  EXPECT_EQ(values(grads[0])[0], 0.25);  // the finite values are unscaled all the same
  // A flag already set is never cleared.
  std::vector<Tensor> finite = {full({5}, 1.0, TensorOptions(kFloat32))};
  kernel(finite, found, inv);
  EXPECT_EQ(found.item(), 1.0);
  // inv_scale 1 passes values through untouched.
  Tensor one = full({}, 1.0, TensorOptions(kFloat32));
  Tensor f = zeros({}, TensorOptions(kFloat32));
  std::vector<Tensor> keep = {tensor<float>({1e-45f, -3.0f})};
  kernel(keep, f, one);
  EXPECT_EQ(values(keep[0]), values(tensor<float>({1e-45f, -3.0f})));
  EXPECT_EQ(f.item(), 0.0);
}

}  // namespace
}  // namespace tapegrad
