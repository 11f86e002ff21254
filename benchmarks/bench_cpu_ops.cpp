// CPU kernel benchmarks: GEMM through OpenBLAS, a broadcasting add, a reduction, and a small
// training step (forward + backward) of a two-layer MLP.
#include <benchmark/benchmark.h>

#include "tapegrad/tapegrad.h"

using namespace tapegrad;

static void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}), b = randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(mm(a, b));
  state.SetItemsProcessed(state.iterations() * 2 * n * n * n);  // flops
}
BENCHMARK(BM_Matmul)->Arg(64)->Arg(256)->Arg(512);

static void BM_AddBroadcast(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, 1024}), b = randn({1024});
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  state.SetBytesProcessed(state.iterations() * n * 1024 * 4 * 2);
}
BENCHMARK(BM_AddBroadcast)->Arg(64)->Arg(1024);

static void BM_SumRows(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, 1024});
  for (auto _ : state) benchmark::DoNotOptimize(sum(a, {0}));
  state.SetBytesProcessed(state.iterations() * n * 1024 * 4);
}
BENCHMARK(BM_SumRows)->Arg(64)->Arg(1024);

static void BM_MlpTrainStep(benchmark::State& state) {
  const int64_t batch = state.range(0);
  Tensor x = randn({batch, 1000});
  Tensor y = randint(0, 10, {batch});
  Tensor w1 = (randn({512, 1000}) * 0.03).requires_grad_(), b1 = zeros({512}).requires_grad_();
  Tensor w2 = (randn({10, 512}) * 0.04).requires_grad_(), b2 = zeros({10}).requires_grad_();
  for (auto _ : state) {
    Tensor loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y);
    loss.backward();
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_MlpTrainStep)->Arg(64)->Arg(256);
