// SGD and Adam/AdamW on the GPU against the CPU: several steps from the same parameters with the
// same gradients, through the multi-tensor kernels (the default) and the per-parameter ones
// (foreach(false)), with many parameters (several launches), one parameter larger than a launch's
// blocks, empty ones, and f64 and 16-bit dtypes. Skips where no GPU is present.
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "support/gpu.h"
#include "support/optim_reference.h"
#include "support/parity.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {
void expect_near(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  testing::expect_allclose(got, want, {rtol, atol}, what);
}

using testing::adam;
using testing::MakeOptimizer;
using testing::sgd;

// Parameter shapes: odd sizes, an empty one, and enough of them for several multi-tensor launches.
std::vector<Shape> many_shapes() {
  std::vector<Shape> shapes{{3, 5}, {0}, {65537}, {1}, {257, 129}, {2, 0, 3}};
  for (int64_t i = 0; i < 70; ++i) shapes.push_back({1 + (i * 37) % 300});
  return shapes;
}

// Runs `steps` steps on the CPU (in cpu_dtype) and on the GPU (in gpu_dtype, foreach on or off)
// from the same starting values and gradients, and compares the parameters.
void expect_gpu_matches_cpu(const std::vector<Shape>& shapes, const MakeOptimizer& make, DType gpu_dtype,
                            DType cpu_dtype, double atol, double rtol, const std::string& what, int steps = 3) {
  Generator g(61);
  std::vector<Tensor> start;
  // Start from values the GPU dtype can hold, so both runs begin identically.
  for (const Shape& s : shapes) start.push_back(randn(s, kFloat64, &g).to(gpu_dtype));
  for (bool foreach : {true, false}) {
    std::vector<Tensor> cpu_params, gpu_params;
    for (const Tensor& t : start) {
      cpu_params.push_back(t.detach().clone().to(kCPU, cpu_dtype).requires_grad_());
      gpu_params.push_back(t.detach().to(kCUDA).requires_grad_());
    }
    auto cpu_opt = make(cpu_params, true), gpu_opt = make(gpu_params, foreach);
    for (int k = 0; k < steps; ++k) {
      Generator gg(100 + k);
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor grad = randn(shapes[i], kFloat64, &gg).to(gpu_dtype);
        cpu_params[i].set_grad(grad.to(kCPU, cpu_dtype));
        gpu_params[i].set_grad(grad.to(kCUDA));
      }
      cpu_opt->step();
      gpu_opt->step();
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(gpu_params[i].dtype(), gpu_dtype);
      expect_near(gpu_params[i], cpu_params[i], atol, rtol,
                  what + (foreach ? " multi-tensor" : " per-parameter") + " param " + std::to_string(i));
    }
  }
}

struct OptimCase {
  std::string name;
  MakeOptimizer make;
};

std::vector<OptimCase> optim_cases() {
  return {{"sgd", sgd(optim::SGDOptions(0.1))},
          {"sgd momentum dampening wd", sgd(optim::SGDOptions(0.05).momentum(0.9).dampening(0.2).weight_decay(1e-2))},
          {"sgd nesterov", sgd(optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3))},
          {"adam", adam(optim::AdamOptions(1e-2), false)},
          {"adam wd amsgrad", adam(optim::AdamOptions(1e-2).weight_decay(1e-2).amsgrad(true), false)},
          {"adamw", adam(optim::AdamOptions(3e-3).betas(0.8, 0.95), true)},
          {"adamw amsgrad", adam(optim::AdamOptions(3e-3).weight_decay(0.1).amsgrad(true), true)}};
}

TEST(CudaOptim, Float32MatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const OptimCase& c : optim_cases())
    expect_gpu_matches_cpu(many_shapes(), c.make, kFloat32, kFloat32, 1e-6, 1e-5, c.name);
}

TEST(CudaOptim, Float64MatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const OptimCase& c : optim_cases())
    expect_gpu_matches_cpu({{7, 3}, {0}, {1000}}, c.make, kFloat64, kFloat64, 1e-13, 1e-12, c.name + " f64");
}

// One parameter larger than a launch's 320 chunks of 65536 elements (4096 in the emulation build,
// multi_tensor_apply.cuh) continues in the next launch.
TEST(CudaOptim, ParameterLargerThanOneLaunch) {
  SKIP_WITHOUT_GPU();
  std::vector<Shape> shapes{{5}, {testing::gpu_size(320 * 65536, 320 * 4096) + 12345}, {3}};
  expect_gpu_matches_cpu(shapes, adam(optim::AdamOptions(1e-2).amsgrad(true), false), kFloat32, kFloat32, 1e-6, 1e-5,
                         "large adam", 2);
  expect_gpu_matches_cpu(shapes, sgd(optim::SGDOptions(0.1).momentum(0.9)), kFloat32, kFloat32, 1e-6, 1e-5, "large sgd",
                         2);
}

// 16-bit parameters and state are updated in f32 and rounded on store; the CPU runs f32 from the
// same rounded start, so the difference is a few roundings of the parameter. Adam runs in bf16
// only: in f16 the second moment of small gradients (1e-3 g^2) underflows, as it does in PyTorch,
// and the update is then meaningless to compare.
TEST(CudaOptim, SixteenBitParameters) {
  SKIP_WITHOUT_GPU();
  std::vector<Shape> shapes{{33, 7}, {1}, {0}, {70000}};
  for (DType dtype : {kFloat16, kBFloat16}) {
    const double tol = dtype == kFloat16 ? 4e-3 : 3e-2;
    expect_gpu_matches_cpu(shapes, sgd(optim::SGDOptions(0.05).momentum(0.9)), dtype, kFloat32, tol, tol,
                           std::string("sgd ") + dtype_name(dtype));
  }
  expect_gpu_matches_cpu(shapes, adam(optim::AdamOptions(1e-2), true), kBFloat16, kFloat32, 3e-2, 3e-2, "adamw bf16");
}

// Parameters whose gradients skip a step have different step counts, so they form their own
// multi-tensor group; the result must equal the per-parameter kernels'.
TEST(CudaOptim, DifferentStepCountsGroupSeparately) {
  SKIP_WITHOUT_GPU();
  for (bool foreach : {true, false}) {
    std::vector<Tensor> cpu_params, gpu_params;
    Generator g(71);
    for (int i = 0; i < 4; ++i) {
      Tensor t = randn({100 + i}, kFloat32, &g);
      cpu_params.push_back(t.clone().requires_grad_());
      gpu_params.push_back(t.to(kCUDA).requires_grad_());
    }
    optim::Adam cpu_opt(cpu_params, optim::AdamOptions(1e-2).foreach (false));
    optim::Adam gpu_opt(gpu_params, optim::AdamOptions(1e-2).foreach (foreach));
    for (int k = 0; k < 4; ++k) {
      for (size_t i = 0; i < 4; ++i) {
        const bool skip = static_cast<int>(i) == k;
        Tensor grad = full({100 + static_cast<int64_t>(i)}, 0.1 * (k + 1) - 0.05 * static_cast<double>(i));
        cpu_params[i].set_grad(skip ? Tensor() : grad);
        gpu_params[i].set_grad(skip ? Tensor() : grad.to(kCUDA));
      }
      cpu_opt.step();
      gpu_opt.step();
    }
    for (size_t i = 0; i < 4; ++i) expect_near(gpu_params[i], cpu_params[i], 1e-6, 1e-5, "param " + std::to_string(i));
  }
}

}  // namespace
}  // namespace tapegrad
