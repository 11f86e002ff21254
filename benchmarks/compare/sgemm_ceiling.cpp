// Best-of-N timing of one large float GEMM through OpenBLAS and through tapegrad.
#include "sgemm_ceiling.h"

#include <cblas.h>

#include <algorithm>
#include <functional>

#include "common/step_timer.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad::bench {

namespace {

// Best rate over `calls` after two untimed calls (the first touches the pages and starts the threads).
double best_gflops(const std::function<void()>& product, double flops, int calls) {
  product();
  product();
  double best_s = 1e300;
  for (int i = 0; i < calls; ++i) {
    Stopwatch watch;
    product();
    best_s = std::min(best_s, watch.seconds());
  }
  return flops / best_s * 1e-9;
}

}  // namespace

SgemmCeiling measure_sgemm_ceiling(int64_t n, int calls, bool with_bf16) {
  SgemmCeiling c;
  c.n = n, c.calls = calls, c.threads = get_num_threads();
  NoGradGuard no_grad;
  Generator gen(0);
  const Tensor a = randn({n, n}, kFloat32, &gen), b = randn({n, n}, kFloat32, &gen);
  Tensor out = empty({n, n}, kFloat32);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const int dim = static_cast<int>(n);
  c.openblas_gflops = best_gflops(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1.0f, a.data<float>(), dim,
                    b.data<float>(), dim, 0.0f, out.data<float>(), dim);
      },
      flops, calls);
  Tensor result;
  c.tapegrad_gflops = best_gflops([&] { result = matmul(a, b); }, flops, calls);
  if (with_bf16) {
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    c.tapegrad_bf16_gflops = best_gflops([&] { result = matmul(a, b); }, flops, calls);
    const Tensor a16 = a.to(kBFloat16), b16 = b.to(kBFloat16);
    c.tapegrad_bf16_operands_gflops = best_gflops([&] { result = matmul(a16, b16); }, flops, calls);
  }
  return c;
}

SgemmCeiling best_of(const SgemmCeiling& a, const SgemmCeiling& b) {
  SgemmCeiling c = a;
  c.calls = a.calls + b.calls;
  c.readings = a.readings + b.readings;
  c.openblas_gflops = std::max(a.openblas_gflops, b.openblas_gflops);
  c.tapegrad_gflops = std::max(a.tapegrad_gflops, b.tapegrad_gflops);
  c.tapegrad_bf16_gflops = std::max(a.tapegrad_bf16_gflops, b.tapegrad_bf16_gflops);
  c.tapegrad_bf16_operands_gflops = std::max(a.tapegrad_bf16_operands_gflops, b.tapegrad_bf16_operands_gflops);
  return c;
}

}  // namespace tapegrad::bench
