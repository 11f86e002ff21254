// checkpoint() on the GPU: gradients bit-identical to the plain run with dropout drawn from the
// default generator and from a generator of its own, and under CUDA autocast (float16 and
// bfloat16) with backward run outside the autocast region, so the recomputation must put the
// forward's autocast state back; the negative controls show the comparisons can fail. The cases
// skip where no GPU is present and run on the emulated one.
#include <vector>

#include "support/gpu.h"
#include "support/test_util.h"
#include "tapegrad/amp/autocast.h"
#include "tapegrad/autograd/checkpoint.h"

namespace tapegrad {
namespace {

using testing::values;

struct Block {
  nn::Linear fc1{8, 16}, fc2{16, 8};
  Generator* generator = nullptr;
  Block() {
    fc1.to(kCUDA);
    fc2.to(kCUDA);
  }
  // Dropout on float32: the CUDA backend draws no 16-bit random numbers (rand in f16 is an error).
  Tensor operator()(const Tensor& x) {
    return fc2.forward(dropout(relu(fc1.forward(x)).to(kFloat32), 0.3, true, generator));
  }
  std::vector<Tensor> tensors(const Tensor& x) const { return {fc1.weight, fc1.bias, fc2.weight, fc2.bias, x}; }
};

struct Grads {
  std::vector<std::vector<double>> grads;
  uint64_t offset = 0;
};

// One forward (under autocast to `low` unless kFloat32) and a backward outside autocast.
Grads run(Block& block, const Tensor& x, bool checkpointed, DType low, Generator& generator,
          bool preserve_rng_state = true) {
  for (const Tensor& t : block.tensors(x)) t.set_grad(Tensor());
  generator.manual_seed(23);
  Tensor loss;
  {
    amp::AutocastGuard autocast(kCUDA, low == kFloat32 ? kFloat16 : low, low != kFloat32);
    CheckpointFunction fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0])}; };
    Tensor h = checkpointed ? checkpoint(fn, {x}, preserve_rng_state)[0] : block(x);
    loss = sum(square(h.to(kFloat32)));
  }
  loss.backward();
  Grads g;
  for (const Tensor& t : block.tensors(x))
    g.grads.push_back(t.grad().defined() ? values(t.grad()) : std::vector<double>{});
  g.offset = generator.offset();
  return g;
}

void expect_identical(const Grads& a, const Grads& b) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_FALSE(a.grads[i].empty()) << "tensor " << i << " has no gradient";
    EXPECT_EQ(a.grads[i], b.grads[i]) << "gradient of tensor " << i;
  }
  EXPECT_EQ(a.offset, b.offset);
}

Tensor input() {
  return testing::leaf({5, 8}, 31).to(kCUDA, kFloat32).detach().requires_grad_(true);
}

TEST(CudaCheckpoint, DropoutOnTheDefaultGeneratorGivesIdenticalGradients) {
  SKIP_WITHOUT_GPU();
  Block block;
  Tensor x = input();
  const Grads plain = run(block, x, false, kFloat32, default_generator());
  expect_identical(run(block, x, true, kFloat32, default_generator()), plain);
  EXPECT_NE(run(block, x, true, kFloat32, default_generator(), false).grads, plain.grads);
}

TEST(CudaCheckpoint, DropoutOnItsOwnGeneratorGivesIdenticalGradients) {
  SKIP_WITHOUT_GPU();
  Generator own(77);
  Block block;
  block.generator = &own;
  Tensor x = input();
  const Grads plain = run(block, x, false, kFloat32, own);
  expect_identical(run(block, x, true, kFloat32, own), plain);
  EXPECT_NE(run(block, x, true, kFloat32, own, false).grads, plain.grads);
}

TEST(CudaCheckpoint, RecomputesUnderTheForwardsCudaAutocast) {
  SKIP_WITHOUT_GPU();
  Block block;
  Tensor x = input();
  const Grads full = run(block, x, false, kFloat32, default_generator());
  for (DType low : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(low == kFloat16 ? "float16" : "bfloat16");
    const Grads plain = run(block, x, false, low, default_generator());
    expect_identical(run(block, x, true, low, default_generator()), plain);
    EXPECT_NE(plain.grads, full.grads);  // the negative control: the precision shows
  }
}

}  // namespace
}  // namespace tapegrad
