// CPU/CUDA parity of GradScaler's fused unscale (the non_finite_check_and_unscale slot) and of a
// scaled training run: every floating dtype (16-bit ones computed in float), more tensors than one
// launch takes, tensors longer than a chunk, an inf or NaN planted late, and the negative control
// of finite gradients. Same formula on both sides (src/math/amp.h), so the values must match
// exactly. The cases skip where no GPU is present and run on the emulated one.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "support/gpu.h"
#include "support/parity.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::gpu_size;
using testing::kExact;

// Gradients of several sizes and dtypes, the same numbers on both devices.
std::vector<Tensor> make_grads(int count, int64_t long_size, uint64_t seed) {
  const DType dtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};
  std::vector<Tensor> grads;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == count / 2 ? long_size : (i * 37) % 50;  // empty ones included
    Generator g(seed + static_cast<uint64_t>(i));
    grads.push_back(mul(randn({n}, TensorOptions(kFloat64), &g), 1000.0).to(dtypes[i % 4]));
  }
  return grads;
}

struct Unscaled {
  std::vector<Tensor> grads;
  double found_inf;
};

Unscaled unscale_on(Device device, const std::vector<Tensor>& source, float inv_scale) {
  std::vector<Tensor> grads;
  for (const Tensor& g : source) grads.push_back(g.to(device).clone());
  Tensor found = zeros({}, TensorOptions(kFloat32).device(device));
  Tensor inv = full({}, inv_scale, TensorOptions(kFloat32).device(device));
  // Grouped by dtype inside the kernel; the list mixes them on purpose.
  TG_KERNEL(device, non_finite_check_and_unscale)(grads, found, inv);
  return {grads, found.item()};
}

void expect_same(const Unscaled& cuda, const Unscaled& cpu, const std::string& what) {
  EXPECT_EQ(cuda.found_inf, cpu.found_inf) << what;
  ASSERT_EQ(cuda.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    testing::expect_parity(cuda.grads[i], cpu.grads[i], kExact, what + ", tensor " + std::to_string(i));
}

TEST(CudaGradScalerParity, FusedUnscaleMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  // 250 tensors: more than one launch's 110; one longer than several 65536-element chunks.
  const int count = static_cast<int>(gpu_size(250, 130));
  const int64_t long_size = gpu_size(1 << 20, 140000);
  const std::vector<Tensor> grads = make_grads(count, long_size, 1);
  for (float inv : {1.0f / 65536.0f, static_cast<float>(1.0 / 3.0), 1.0f}) {
    SCOPED_TRACE(inv);
    // Negative control: finite gradients leave the flag at 0.
    Unscaled cpu = unscale_on(kCPU, grads, inv), cuda = unscale_on(kCUDA, grads, inv);
    EXPECT_EQ(cpu.found_inf, 0.0);
    expect_same(cuda, cpu, "finite");
  }
  // One bad value in the last tensor, and one deep inside the long tensor, separately.
  const double bad_values[] = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                               -std::numeric_limits<double>::infinity()};
  for (double bad : bad_values) {
    for (int where : {count - 1, count / 2}) {
      SCOPED_TRACE(std::to_string(bad) + " in tensor " + std::to_string(where));
      std::vector<Tensor> planted = grads;
      Tensor target = planted[where].to(kFloat64);
      const int64_t at = target.numel() - 2;
      std::vector<double> v = testing::values(target);
      v[static_cast<size_t>(at)] = bad;
      planted[where] = tensor<double>(v).to(grads[where].dtype());
      Unscaled cpu = unscale_on(kCPU, planted, 0.25f), cuda = unscale_on(kCUDA, planted, 0.25f);
      EXPECT_EQ(cpu.found_inf, 1.0);
      expect_same(cuda, cpu, "planted");
    }
  }
}

// A scaled SGD run on each device, with inf and NaN planted in the loss on some steps: the same
// skipped steps, scales, growth trackers and parameters.
TEST(CudaGradScalerParity, ScaledTrainingMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  auto run = [](Device device) {
    Generator g(5);
    Tensor w0 = randn({3, 4}, TensorOptions(kFloat32), &g);
    Tensor w = w0.to(device).requires_grad_(true);
    Tensor x = randn({4, 3}, TensorOptions(kFloat32), &g).to(device);
    optim::SGD opt({w}, optim::SGDOptions(0.5).momentum(0.9));
    amp::GradScaler scaler(1024.0, 2.0, 0.5, 3);
    std::vector<double> trace;
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      Tensor loss = sum(square(matmul(w, x)));
      if (step == 4) loss = mul(loss, std::numeric_limits<double>::infinity());
      if (step == 11) loss = add(loss, std::numeric_limits<double>::quiet_NaN());
      scaler.scale(loss).backward();
      trace.push_back(scaler.step(opt) ? 1.0 : 0.0);
      scaler.update();
      trace.push_back(scaler.get_scale());
      trace.push_back(static_cast<double>(scaler.get_growth_tracker()));
    }
    return std::make_pair(trace, w.detach());
  };
  auto cpu = run(kCPU), cuda = run(kCUDA);
  EXPECT_EQ(cuda.first, cpu.first);
  EXPECT_EQ(cpu.first[4 * 3], 0.0);  // step 4 was skipped
  testing::expect_parity(cuda.second, cpu.second, {1e-5, 1e-5}, "parameters");
}

// One optimiser over a CPU and a CUDA parameter: a flag per device, and an inf on either device
// skips the step for both.
TEST(CudaGradScalerParity, OneFlagPerDevice) {
  SKIP_WITHOUT_GPU();
  for (Device bad_on : {kCPU, kCUDA}) {
    Tensor a = full({4}, 1.0, TensorOptions(kFloat32)).requires_grad_(true);
    Tensor b = full({4}, 1.0, TensorOptions(kFloat32).device(kCUDA)).requires_grad_(true);
    optim::SGD opt({a, b}, optim::SGDOptions(0.1));
    amp::GradScaler scaler(8.0);
    scaler.scale(add(sum(a), sum(b).cpu())).backward();
    Tensor g = bad_on == kCPU ? a.grad() : b.grad();
    g.copy_(full({4}, std::numeric_limits<double>::infinity(), TensorOptions(kFloat32).device(bad_on)));
    EXPECT_FALSE(scaler.step(opt));
    EXPECT_EQ(testing::values(a), std::vector<double>(4, 1.0));
    EXPECT_EQ(testing::values(b), std::vector<double>(4, 1.0));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 4.0);
  }
}

}  // namespace
}  // namespace tapegrad
