// CPUOffloadOptimizer (tapegrad/distributed/offload.h) against the plain optimiser on the same
// device: SGD with momentum, Adam and AdamW over several steps and buckets, a scheduler, a parameter
// without a gradient, CPU parameters mixed in, 16-bit parameters, GradScaler, state dicts in both
// directions, the GPU memory it keeps free (with the plain optimiser as the control that the
// measurement sees state at all), the asynchronous download it is built on, and bad input. The
// CUDA cases skip without a GPU and run on the emulated one; the CPU-only cases run everywhere.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/test_util.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad {
namespace {

using distributed::CPUOffloadOptimizer;
using distributed::OptimizerFactory;
using testing::expect_allclose;
using testing::expect_error;
using testing::kExact;
using testing::Tol;

// Two float32 results from the same update formula (src/math/optim.h) on two backends.
constexpr Tol kRel{1e-6, 0};

// A plain optimiser over `params`, and the same kind for the offload wrapper.
using MakePlain = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

struct Kind {
  std::string name;
  MakePlain make;
};

std::vector<Kind> kinds() {
  return {{"adam",
           [](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
             return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions(1e-2).weight_decay(1e-2));
           }},
          {"adamw amsgrad",
           [](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
             return std::make_unique<optim::AdamW>(
                 std::move(g), optim::AdamOptions(3e-3).betas(0.8, 0.95).amsgrad(true).weight_decay(0.1));
           }},
          {"sgd momentum", [](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
             return std::make_unique<optim::SGD>(std::move(g),
                                                 optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
           }}};
}

OptimizerFactory adam_factory(double lr = 1e-2) {
  return [lr](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions(lr));
  };
}

// Odd sizes, an empty one, and one of several hundred elements.
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s{{7, 5}, {13}, {0}, {1}, {300}, {4, 3}};
  return s;
}

// Copies of `start` on `device`, as leaves that require grad.
std::vector<Tensor> leaves_on(const std::vector<Tensor>& start, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& t : start) out.push_back(t.detach().clone().to(device).requires_grad_());
  return out;
}

std::vector<Tensor> start_values(DType dtype = kFloat32, uint64_t seed = 3) {
  Generator g(seed);
  std::vector<Tensor> start;
  for (const Shape& s : shapes()) start.push_back(randn(s, TensorOptions(kFloat64), &g).to(dtype));
  return start;
}

// The same gradient of step k for parameter i on every side, in `params[i]`'s dtype and device;
// `skip(k, i)` leaves it without one.
void set_grads(
    const std::vector<std::vector<Tensor>>& sides, int k,
    const std::function<bool(int, size_t)>& skip = [](int, size_t) { return false; }) {
  Generator g(100 + static_cast<uint64_t>(k));
  const std::vector<Tensor>& first = sides.front();
  for (size_t i = 0; i < first.size(); ++i) {
    Tensor grad = randn(first[i].sizes(), TensorOptions(kFloat64), &g);
    for (const std::vector<Tensor>& params : sides)
      params[i].set_grad(skip(k, i) ? Tensor() : grad.to(params[i].device(), params[i].dtype()));
  }
}

void expect_same_params(const std::vector<Tensor>& got, const std::vector<Tensor>& want, Tol tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_allclose(got[i], want[i], tol, what + ", parameter " + std::to_string(i));
}

bool bit_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (testing::values(a[i]) != testing::values(b[i])) return false;
  return true;
}

// --- Training against the plain optimiser --------------------------------------------------------

// Several steps on CUDA parameters: the wrapper against the plain optimiser on the GPU (the same
// formula on another backend: 1e-6 relative; bit for bit on the emulated GPU, which runs it on the
// host) and on the CPU (the same kernel on the same numbers: bit for bit), with one bucket per
// parameter, a few buckets, and one bucket.
TEST(CpuOffload, MatchesThePlainOptimizerOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  for (const Kind& kind : kinds()) {
    for (int64_t bucket_bytes : {int64_t(1), int64_t(200), CPUOffloadOptimizer::kDefaultBucketBytes}) {
      SCOPED_TRACE(kind.name + ", bucket_bytes " + std::to_string(bucket_bytes));
      std::vector<Tensor> off = leaves_on(start, kCUDA), gpu = leaves_on(start, kCUDA), cpu = leaves_on(start, kCPU);
      CPUOffloadOptimizer opt(off, kind.make, bucket_bytes);
      auto plain_gpu = kind.make({optim::ParamGroup(gpu)});
      auto plain_cpu = kind.make({optim::ParamGroup(cpu)});
      // One bucket per parameter, but the empty one closes none: it shares the next one's.
      if (bucket_bytes == 1) EXPECT_EQ(opt.buckets().size(), shapes().size() - 1);
      if (bucket_bytes == CPUOffloadOptimizer::kDefaultBucketBytes) EXPECT_EQ(opt.buckets().size(), 1u);
      for (int k = 0; k < 4; ++k) {
        set_grads({off, gpu, cpu}, k);
        opt.step();
        plain_gpu->step();
        plain_cpu->step();
      }
      for (const Tensor& p : off) EXPECT_TRUE(p.device().is_cuda());
      expect_same_params(off, cpu, kExact, "against the CPU");
      expect_same_params(off, gpu, kRel, "against the GPU");
      if (testing::cuda_is_emulated()) EXPECT_TRUE(bit_identical(off, gpu));
      // Negative control: the comparison sees a one-ulp change.
      Tensor changed = off[0].detach().clone();
      changed.copy_(add(changed, mul(changed, 1e-6)));
      EXPECT_FALSE(bit_identical({changed}, {gpu[0]}));
    }
  }
}

// Parameters on two GPUs in one bucket: each travels on its own device's stream, with an event
// per device. Against the plain optimiser on the CPU (a plain one over both GPUs would launch its
// kernels on one device only).
TEST(CpuOffload, ParametersOnTwoDevices) {
  SKIP_WITHOUT_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "one CUDA device";
  const std::vector<Tensor> start = start_values();
  std::vector<Tensor> off, cpu = leaves_on(start, kCPU);
  for (size_t i = 0; i < start.size(); ++i)
    off.push_back(start[i].detach().clone().to(Device(DeviceKind::CUDA, static_cast<int>(i % 2))).requires_grad_());
  CPUOffloadOptimizer opt(off, adam_factory());
  optim::Adam plain(cpu, optim::AdamOptions(1e-2));
  ASSERT_EQ(opt.buckets().size(), 1u);
  for (int k = 0; k < 3; ++k) {
    set_grads({off, cpu}, k);
    opt.step();
    plain.step();
  }
  for (size_t i = 0; i < off.size(); ++i) EXPECT_EQ(off[i].device().index(), static_cast<int>(i % 2));
  expect_same_params(off, cpu, kExact, "two devices");
}

std::shared_ptr<nn::Sequential> make_mlp(int64_t in, int64_t hidden, int64_t out, uint64_t seed) {
  Generator g(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(in, hidden, true, &g), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, out, true, &g)});
}

// A real training loop on the GPU: forward, backward, step, zero_grad; the wrapper's losses and
// weights follow the plain AdamW's.
TEST(CpuOffload, TrainsAnMlpLikeThePlainOptimizer) {
  SKIP_WITHOUT_GPU();
  auto a = make_mlp(20, 32, 5, 7), b = make_mlp(20, 32, 5, 7);
  a->to(kCUDA);
  b->to(kCUDA);
  auto factory = [](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(g), optim::AdamOptions(1e-2).weight_decay(1e-2));
  };
  CPUOffloadOptimizer opt(a->parameters(), factory, 512);
  auto plain = factory({optim::ParamGroup(b->parameters())});
  EXPECT_GT(opt.buckets().size(), 1u);
  Generator g(9);
  Tensor x = randn({16, 20}, {}, &g).to(kCUDA);
  Tensor y = randint(0, 5, {16}, TensorOptions(kInt64), &g).to(kCUDA);
  double first = 0, last = 0;
  for (int k = 0; k < 6; ++k) {
    Tensor la = cross_entropy(a->forward(x), y), lb = cross_entropy(b->forward(x), y);
    la.backward();
    lb.backward();
    opt.step();
    plain->step();
    opt.zero_grad();
    plain->zero_grad();
    EXPECT_NEAR(la.item(), lb.item(), 1e-6 * std::fabs(lb.item())) << "step " << k;
    (k == 0 ? first : last) = la.item();
  }
  EXPECT_LT(last, first);
  for (const Tensor& p : a->parameters()) EXPECT_FALSE(p.grad().defined());
  expect_same_params(a->parameters(), b->parameters(), {1e-5, 1e-7}, "after 6 steps");
}

// A scheduler made for the wrapper sets the rate the local optimiser uses.
TEST(CpuOffload, SchedulerChangesTheLearningRate) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  std::vector<Tensor> off = leaves_on(start, kCUDA), gpu = leaves_on(start, kCUDA), fixed = leaves_on(start, kCUDA);
  CPUOffloadOptimizer opt(off, adam_factory(0.1), 64);
  CPUOffloadOptimizer unscheduled(fixed, adam_factory(0.1), 64);
  optim::Adam plain(gpu, optim::AdamOptions(0.1));
  optim::StepLR sched(opt, 1, 0.5), plain_sched(plain, 1, 0.5);
  for (int k = 0; k < 4; ++k) {
    set_grads({off, gpu, fixed}, k);
    opt.step();
    plain.step();
    unscheduled.step();
    sched.step();
    plain_sched.step();
    EXPECT_DOUBLE_EQ(opt.lr(), 0.1 * std::pow(0.5, k + 1));
    EXPECT_DOUBLE_EQ(opt.local_optimizer().param_groups()[0].lr(), 0.1 * std::pow(0.5, k));  // copied at step()
  }
  expect_same_params(off, gpu, kRel, "scheduled");
  // Negative control: without the schedule the weights end elsewhere.
  EXPECT_FALSE(bit_identical(off, fixed));
}

// A parameter without a gradient on some steps is skipped: no update, no state, no step count.
TEST(CpuOffload, ParameterWithoutGradIsSkipped) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  std::vector<Tensor> off = leaves_on(start, kCUDA), gpu = leaves_on(start, kCUDA);
  CPUOffloadOptimizer opt(off, adam_factory(), 1);
  optim::Adam plain(gpu, optim::AdamOptions(1e-2));
  auto skip = [](int k, size_t i) { return i == 1 || (i == 4 && k < 2); };
  set_grads({off, gpu}, 0, skip);
  opt.step();
  plain.step();
  expect_allclose(off[1], start[1], kExact, "never had a gradient");
  expect_allclose(off[4], start[4], kExact, "no gradient yet");
  std::set<std::string> keys;
  for (const auto& entry : opt.state_dict()) keys.insert(entry.first);
  EXPECT_EQ(keys.count("0.step"), 1u);
  EXPECT_EQ(keys.count("1.step"), 0u);
  EXPECT_EQ(keys.count("4.exp_avg"), 0u);
  for (int k = 1; k < 4; ++k) {
    set_grads({off, gpu}, k, skip);
    opt.step();
    plain.step();
  }
  expect_allclose(off[1], start[1], kExact, "never had a gradient");
  expect_same_params(off, gpu, kRel, "with skipped gradients");
  // Both have stepped parameter 4 twice.
  for (const auto& [key, t] : opt.state_dict())
    if (key == "4.step") EXPECT_EQ(t.item(), 2.0);
}

// CPU parameters are stepped as they are, in the same optimiser; only the CUDA ones are offloaded.
TEST(CpuOffload, CpuParametersMixedIn) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  auto place = [&](size_t i) { return i % 2 == 0 ? Device(kCUDA) : Device(kCPU); };
  std::vector<Tensor> off, plain_params;
  for (size_t i = 0; i < start.size(); ++i) {
    off.push_back(start[i].detach().clone().to(place(i)).requires_grad_());
    plain_params.push_back(start[i].detach().clone().to(place(i)).requires_grad_());
  }
  CPUOffloadOptimizer opt(
      {optim::ParamGroup({off[0], off[1], off[2]}), optim::ParamGroup({off[3], off[4], off[5]}).lr(5e-3)},
      adam_factory(), 1);
  optim::Adam plain({optim::ParamGroup({plain_params[0], plain_params[1], plain_params[2]}),
                     optim::ParamGroup({plain_params[3], plain_params[4], plain_params[5]}).lr(5e-3)},
                    optim::AdamOptions(1e-2));
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_EQ(opt.is_offloaded(i), place(i).is_cuda());
    if (!opt.is_offloaded(i)) EXPECT_TRUE(opt.host_param(i).is_same(off[i]));
  }
  for (int k = 0; k < 3; ++k) {
    set_grads({off, plain_params}, k);
    Tensor cpu_grad = off[1].grad();
    opt.step();
    plain.step();
    EXPECT_TRUE(off[1].grad().is_same(cpu_grad)) << "the CPU parameter's gradient is the caller's again";
  }
  expect_same_params(off, plain_params, kRel, "mixed devices");
  // Only the CUDA parameters' state counts as offloaded: 2 moments of 7*5 + 0 + 300 elements.
  EXPECT_EQ(opt.offloaded_state_bytes(), 2 * (35 + 0 + 300) * 4);
}

// 16-bit parameters get a float32 master: the update is an f32 Adam on the widened gradients,
// rounded once on the way back.
TEST(CpuOffload, SixteenBitParametersUseFloat32Masters) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<Tensor> start = start_values(dtype);
    std::vector<Tensor> off = leaves_on(start, kCUDA);
    std::vector<Tensor> ref = leaves_on(start, kCPU);
    for (Tensor& r : ref) r = r.detach().to(kFloat32).requires_grad_();
    CPUOffloadOptimizer opt(off, adam_factory(), 64);
    optim::Adam plain(ref, optim::AdamOptions(1e-2));
    for (int k = 0; k < 3; ++k) {
      set_grads({off}, k);
      for (size_t i = 0; i < off.size(); ++i) ref[i].set_grad(off[i].grad().to(kCPU, kFloat32));
      opt.step();
      plain.step();
    }
    for (size_t i = 0; i < off.size(); ++i) {
      EXPECT_EQ(off[i].dtype(), dtype);
      EXPECT_EQ(opt.host_param(i).dtype(), kFloat32);
      expect_allclose(opt.host_param(i), ref[i], kExact, "master " + std::to_string(i));
      expect_allclose(off[i], ref[i].to(dtype), kExact, "rounded parameter " + std::to_string(i));
    }
  }
}

// scaler.unscale_(opt) and scaler.step(opt) act on the device gradients; a step with an inf is
// skipped on both sides.
TEST(CpuOffload, GradScalerWorks) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  std::vector<Tensor> off = leaves_on(start, kCUDA), gpu = leaves_on(start, kCUDA);
  CPUOffloadOptimizer opt(off, adam_factory(), 64);
  optim::Adam plain(gpu, optim::AdamOptions(1e-2));
  amp::GradScaler scaler_off(1024.0, 2.0, 0.5, 2), scaler_plain(1024.0, 2.0, 0.5, 2);
  for (int k = 0; k < 5; ++k) {
    // The gradient of sum(w * c) * scale is c * scale.
    Generator g(40 + static_cast<uint64_t>(k));
    std::vector<Tensor> coeffs;
    for (const Shape& s : shapes()) coeffs.push_back(randn(s, {}, &g).to(kCUDA));
    if (k == 2) coeffs[4] = full({300}, std::numeric_limits<double>::infinity()).to(kCUDA);
    auto loss_of = [&](const std::vector<Tensor>& ps) {
      Tensor loss = zeros({}).to(kCUDA);
      for (size_t i = 0; i < ps.size(); ++i) loss = add(loss, sum(mul(ps[i], coeffs[i])));
      return loss;
    };
    scaler_off.scale(loss_of(off)).backward();
    scaler_plain.scale(loss_of(gpu)).backward();
    scaler_off.unscale_(opt);
    const bool stepped = scaler_off.step(opt);
    EXPECT_EQ(stepped, scaler_plain.step(plain)) << "step " << k;
    EXPECT_EQ(stepped, k != 2) << "step " << k;
    scaler_off.update();
    scaler_plain.update();
    EXPECT_EQ(scaler_off.get_scale(), scaler_plain.get_scale());
    opt.zero_grad();
    plain.zero_grad();
  }
  expect_same_params(off, gpu, kRel, "scaled");
}

// --- State dicts ---------------------------------------------------------------------------------

std::set<std::string> keys_of(const StateDict& sd) {
  std::set<std::string> keys;
  for (const auto& entry : sd) keys.insert(entry.first);
  return keys;
}

// Saved by the wrapper, loaded by a plain Adam on the GPU, and the other way; training goes on as
// if nothing had changed hands.
TEST(CpuOffload, StateDictRoundTripsWithPlainAdam) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  auto factory = [](std::vector<optim::ParamGroup> g) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(g), optim::AdamOptions(1e-2).amsgrad(true));
  };
  // The reference: a plain Adam through all 5 steps.
  std::vector<Tensor> ref = leaves_on(start, kCUDA);
  auto reference = factory({optim::ParamGroup(ref)});
  for (int k = 0; k < 5; ++k) {
    set_grads({ref}, k);
    reference->step();
  }
  // The wrapper for 3 steps, then a plain Adam from its state.
  {
    std::vector<Tensor> params = leaves_on(start, kCUDA);
    CPUOffloadOptimizer opt(params, factory, 64);
    for (int k = 0; k < 3; ++k) {
      set_grads({params}, k);
      opt.step();
    }
    const StateDict saved = opt.state_dict();
    EXPECT_EQ(keys_of(saved), keys_of(reference->state_dict()));  // the plain optimiser's names
    for (const auto& [key, t] : saved) EXPECT_TRUE(t.device().is_cpu()) << key;
    std::vector<Tensor> resumed = leaves_on(params, kCUDA);
    auto plain = factory({optim::ParamGroup(resumed)});
    plain->load_state_dict(saved);
    EXPECT_EQ(keys_of(plain->state_dict()), keys_of(saved));
    for (int k = 3; k < 5; ++k) {
      set_grads({resumed}, k);
      plain->step();
    }
    expect_same_params(resumed, ref, kRel, "offload then plain");
  }
  // A plain Adam on the GPU for 3 steps, then the wrapper from its state.
  {
    std::vector<Tensor> params = leaves_on(start, kCUDA);
    auto plain = factory({optim::ParamGroup(params)});
    for (int k = 0; k < 3; ++k) {
      set_grads({params}, k);
      plain->step();
    }
    const StateDict saved = plain->state_dict();
    std::vector<Tensor> resumed = leaves_on(params, kCUDA);
    CPUOffloadOptimizer opt(resumed, factory, 64);
    opt.load_state_dict(saved);
    EXPECT_EQ(keys_of(opt.state_dict()), keys_of(saved));
    EXPECT_EQ(opt.offloaded_state_bytes(), 3 * (35 + 13 + 0 + 1 + 300 + 12) * 4);  // three moments with amsgrad
    for (const Tensor& p : opt.local_optimizer().params()) EXPECT_TRUE(p.device().is_cpu());
    for (int k = 3; k < 5; ++k) {
      set_grads({resumed}, k);
      opt.step();
    }
    expect_same_params(resumed, ref, kRel, "plain then offload");
    for (const auto& [key, t] : opt.state_dict()) EXPECT_TRUE(t.device().is_cpu()) << key;
  }
}

// After the model's values change outside step() (a checkpoint loaded into it), the masters are
// refreshed from the device; without that the next step would restore the old values.
TEST(CpuOffload, CopyParamsToHostAfterLoadingTheModel) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  std::vector<Tensor> off = leaves_on(start, kCUDA), gpu = leaves_on(start, kCUDA);
  CPUOffloadOptimizer opt(off, adam_factory(), 64);
  optim::Adam plain(gpu, optim::AdamOptions(1e-2));
  set_grads({off, gpu}, 0);
  opt.step();
  plain.step();
  {
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < off.size(); ++i) {
      Tensor a = off[i], b = gpu[i];
      a.copy_(full(a.sizes(), 0.25).to(kCUDA));
      b.copy_(full(b.sizes(), 0.25).to(kCUDA));
    }
  }
  opt.copy_params_to_host();
  set_grads({off, gpu}, 1);
  opt.step();
  plain.step();
  expect_same_params(off, gpu, kRel, "after reloading");
}

// --- Memory --------------------------------------------------------------------------------------

// The device allocator's bytes across a step: the plain optimiser's grow by its state (the control
// that the measurement sees state at all), the wrapper's not at all.
TEST(CpuOffload, NoOptimizerStateOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  int64_t elements = 0;
  for (const Tensor& t : start) elements += t.numel();
  auto growth = [&](bool offload) {
    std::vector<Tensor> params = leaves_on(start, kCUDA);
    std::unique_ptr<optim::Optimizer> opt;
    if (offload)
      opt = std::make_unique<CPUOffloadOptimizer>(params, adam_factory(), 64);
    else
      opt = adam_factory()({optim::ParamGroup(params)});
    set_grads({params}, 0);
    cuda::synchronize();
    const int64_t before = static_cast<int64_t>(cuda::memory_allocated());
    opt->step();
    cuda::synchronize();
    return static_cast<int64_t>(cuda::memory_allocated()) - before;
  };
  // Without the caching allocator (the sanitizer runs) its statistics stay zero.
  if (cuda::caching_allocator_enabled()) {
    EXPECT_GE(growth(false), 2 * elements * 4) << "the plain Adam's moments on the device";
    EXPECT_EQ(growth(true), 0);
  }
  std::vector<Tensor> params = leaves_on(start, kCUDA);
  CPUOffloadOptimizer opt(params, adam_factory(), 64);
  set_grads({params}, 0);
  opt.step();
  for (const auto& [key, t] : opt.state_dict()) EXPECT_TRUE(t.device().is_cpu()) << key;
  EXPECT_EQ(opt.offloaded_state_bytes(), 2 * elements * 4);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(opt.host_param(i).is_pinned());
}

// mlp_seed's model, Linear(1000,512)-ReLU-Linear(512,10), with Adam: the device memory one step
// adds, plain and offloaded, printed for docs/distributed.md.
TEST(CpuOffload, MlpSeedMemorySaved) {
  SKIP_WITHOUT_GPU();
  if (!cuda::caching_allocator_enabled()) GTEST_SKIP() << "the caching allocator is off: no statistics";
  auto measure = [](bool offload, int64_t& reported) {
    auto model = make_mlp(1000, 512, 10, 1);
    model->to(kCUDA);
    std::unique_ptr<optim::Optimizer> opt;
    if (offload)
      opt = std::make_unique<CPUOffloadOptimizer>(model->parameters(), adam_factory(1e-3));
    else
      opt = adam_factory(1e-3)({optim::ParamGroup(model->parameters())});
    Generator g(2);
    Tensor x = randn({4, 1000}, {}, &g).to(kCUDA);
    Tensor y = randint(0, 10, {4}, TensorOptions(kInt64), &g).to(kCUDA);
    cross_entropy(model->forward(x), y).backward();
    cuda::synchronize();
    const int64_t before = static_cast<int64_t>(cuda::memory_allocated());
    opt->step();
    cuda::synchronize();
    reported = offload ? static_cast<CPUOffloadOptimizer&>(*opt).offloaded_state_bytes()
                       : distributed::optimizer_state_bytes(*opt);
    return static_cast<int64_t>(cuda::memory_allocated()) - before;
  };
  int64_t plain_state = 0, offloaded_state = 0;
  const int64_t plain_growth = measure(false, plain_state);
  const int64_t offload_growth = measure(true, offloaded_state);
  const int64_t elements = 1000 * 512 + 512 + 512 * 10 + 10;
  EXPECT_EQ(offloaded_state, 2 * elements * 4);
  EXPECT_GT(plain_state, offloaded_state);  // with the step counts
  EXPECT_GE(plain_growth, offloaded_state);
  EXPECT_EQ(offload_growth, 0);
  std::printf(
      "[offload] mlp_seed 1000-512-10 Adam: device memory added by the first step: plain %lld bytes, "
      "offloaded %lld bytes; optimiser state kept on the host: %lld bytes\n",
      static_cast<long long>(plain_growth), static_cast<long long>(offload_growth),
      static_cast<long long>(offloaded_state));
  ::testing::Test::RecordProperty("plain_device_bytes", std::to_string(plain_growth));
  ::testing::Test::RecordProperty("offloaded_device_bytes", std::to_string(offload_growth));
  ::testing::Test::RecordProperty("offloaded_state_bytes", std::to_string(offloaded_state));
}

// step() waits on the host once per bucket for its gradients, and from the second step once more
// for the bucket's previous uploads: events, never the whole device. Every non-empty parameter
// travels down and up once. The control: fetching the gradients with Tensor::cpu() waits once per
// parameter.
TEST(CpuOffload, StepWaitsOnEventsPerBucket) {
  SKIP_WITHOUT_GPU();
  const std::vector<Tensor> start = start_values();
  std::vector<Tensor> params = leaves_on(start, kCUDA);
  CPUOffloadOptimizer opt(params, adam_factory(), 200);
  const uint64_t buckets = opt.buckets().size();
  ASSERT_GT(buckets, 1u);
  uint64_t nonempty = 0;
  for (const Tensor& p : params) nonempty += p.numel() > 0 ? 1 : 0;
  for (int k = 0; k < 3; ++k) {
    set_grads({params}, k);
    cuda::synchronize();
    const cuda::Counters before = cuda::counters();
    opt.step();
    const cuda::Counters used = cuda::counters() - before;
    EXPECT_LE(used.host_syncs, (k == 0 ? 1 : 2) * buckets) << "step " << k;
    EXPECT_EQ(used.copies, 2 * nonempty) << "step " << k;
  }
  const cuda::Counters before = cuda::counters();
  for (const Tensor& p : params) p.grad().cpu();
  EXPECT_GE((cuda::counters() - before).host_syncs, nonempty);
}

// --- The asynchronous download step() is built on ------------------------------------------------

TEST(CpuOffload, CopyToHostAsyncArrivesAfterTheEvent) {
  SKIP_WITHOUT_GPU();
  Tensor src = arange(0, 1000, 1, TensorOptions(kFloat32)).to(kCUDA);
  Tensor dst = full({1000}, -1.0).pin_memory();
  cuda::copy_to_host_async(dst, src);
  // Negative control, where the device runs only when the host waits (the emulator): the values
  // are not there before the event, so a step that forgot to wait would read stale gradients.
  if (testing::cuda_is_emulated()) EXPECT_EQ(dst.tolist<float>()[999], -1.0f);
  cuda::Event done;
  done.record();
  done.synchronize();
  expect_allclose(dst, src.cpu(), kExact, "after the event");
  expect_error([&] { cuda::copy_to_host_async(zeros({1000}), src); }, {"cuda::copy_to_host_async", "pinned"});
  expect_error([&] { cuda::copy_to_host_async(full({1000}, 0.0, TensorOptions(kFloat64)).pin_memory(), src); },
               {"cuda::copy_to_host_async", "float64", "float32"});
  expect_error([&] { cuda::copy_to_host_async(src.clone(), src); }, {"cuda::copy_to_host_async", "CPU"});
  expect_error([&] { cuda::copy_to_host_async(dst, src.cpu()); }, {"cuda::copy_to_host_async", "CUDA device"});
}

// --- Without a GPU: CPU parameters only ----------------------------------------------------------

// Every parameter on the CPU: nothing is offloaded, and the wrapper is the plain optimiser.
TEST(CpuOffload, CpuOnlyParametersAreThePlainOptimizer) {
  const std::vector<Tensor> start = start_values();
  for (const Kind& kind : kinds()) {
    SCOPED_TRACE(kind.name);
    std::vector<Tensor> off = leaves_on(start, kCPU), cpu = leaves_on(start, kCPU);
    CPUOffloadOptimizer opt(off, kind.make);
    auto plain = kind.make({optim::ParamGroup(cpu)});
    EXPECT_TRUE(opt.buckets().empty());
    for (int k = 0; k < 3; ++k) {
      set_grads({off, cpu}, k);
      opt.step();
      plain->step();
    }
    expect_same_params(off, cpu, kExact, kind.name);
    EXPECT_EQ(opt.offloaded_state_bytes(), 0);
    EXPECT_EQ(keys_of(opt.state_dict()), keys_of(plain->state_dict()));
  }
}

// --- Errors --------------------------------------------------------------------------------------

TEST(CpuOffloadErrors, BadConstruction) {
  Tensor a = zeros({3}).requires_grad_(), b = zeros({2}).requires_grad_();
  expect_error([&] { CPUOffloadOptimizer({a}, OptimizerFactory()); }, {"CPUOffloadOptimizer", "factory is empty"});
  expect_error([&] { CPUOffloadOptimizer(std::vector<Tensor>{}, adam_factory()); },
               {"CPUOffloadOptimizer", "no parameter that requires grad", "0 parameters"});
  expect_error([&] { CPUOffloadOptimizer({zeros({2})}, adam_factory()); },
               {"CPUOffloadOptimizer", "no parameter that requires grad", "1 parameters"});
  expect_error(
      [&] {
        CPUOffloadOptimizer({a, b, a}, adam_factory());
      },
      {"CPUOffloadOptimizer", "parameter 2 of group 0 is also parameter 0 of group 0"});
  expect_error(
      [&] {
        CPUOffloadOptimizer({optim::ParamGroup({a}), optim::ParamGroup({b, a})}, adam_factory());
      },
      {"CPUOffloadOptimizer", "parameter 1 of group 1 is also parameter 0 of group 0"});
  expect_error(
      [&] {
        CPUOffloadOptimizer({a, mul(b, 2.0)}, adam_factory());
      },
      {"CPUOffloadOptimizer", "parameter 1 of group 0 is not a leaf"});
  expect_error(
      [&] {
        CPUOffloadOptimizer({a, Tensor()}, adam_factory());
      },
      {"CPUOffloadOptimizer", "parameter 1 of group 0 is undefined"});
  expect_error([&] { CPUOffloadOptimizer({a}, adam_factory(), 0); }, {"CPUOffloadOptimizer", "bucket_bytes", "0"});
  expect_error([&] { CPUOffloadOptimizer({a}, [](std::vector<optim::ParamGroup>) { return nullptr; }); },
               {"CPUOffloadOptimizer", "factory returned null"});
  expect_error([&] { CPUOffloadOptimizer({a}, adam_factory(-1.0)); },
               {"CPUOffloadOptimizer", "refused the parameter groups", "learning rate -1"});
  expect_error(
      [&] {
        CPUOffloadOptimizer({a}, [&](std::vector<optim::ParamGroup>) -> std::unique_ptr<optim::Optimizer> {
          return std::make_unique<optim::Adam>(std::vector<Tensor>{b});
        });
      },
      {"CPUOffloadOptimizer", "must build its optimizer over the groups it is given"});
  // Frozen parameters are left out, not refused.
  CPUOffloadOptimizer opt({a, zeros({4}), b}, adam_factory());
  EXPECT_EQ(opt.params().size(), 2u);
  expect_error([&] { opt.add_param_group(optim::ParamGroup({zeros({1}).requires_grad_()})); },
               {"CPUOffloadOptimizer.add_param_group", "not supported"});
}

// An invalid option set after construction throws at step(), before any parameter moves.
TEST(CpuOffloadErrors, InvalidOptionAtStepMovesNothing) {
  Tensor a = full({3}, 1.0).requires_grad_();
  CPUOffloadOptimizer opt({a}, adam_factory());
  a.set_grad(full({3}, 1.0));
  opt.param_groups()[0].lr(-1.0);
  expect_error([&] { opt.step(); }, {"CPUOffloadOptimizer (parameter group 0)", "learning rate -1"});
  testing::expect_close(a, {1.0, 1.0, 1.0}, 0.0);
  EXPECT_EQ(keys_of(opt.state_dict()).count("0.step"), 0u);
  // The control: with the option fixed the same step moves it.
  opt.param_groups()[0].lr(0.5);
  opt.step();
  EXPECT_EQ(keys_of(opt.state_dict()).count("0.step"), 1u);
  testing::expect_close(a, {0.5, 0.5, 0.5}, 1e-6);
}

// A CUDA parameter moved off its device after construction is refused by name.
TEST(CpuOffloadErrors, ParameterMovedAfterConstruction) {
  SKIP_WITHOUT_GPU();
  auto model = make_mlp(4, 3, 2, 1);
  model->to(kCUDA);
  CPUOffloadOptimizer opt(model->parameters(), adam_factory());
  model->to(kCPU);
  for (const Tensor& p : model->parameters()) p.set_grad(zeros_like(p));
  expect_error([&] { opt.step(); }, {"CPUOffloadOptimizer.step", "parameter 0 was on cuda:0", "is on cpu"});
}

}  // namespace
}  // namespace tapegrad
