// float16 and bfloat16 tensors on the CPU: every kernel computes in float and rounds its result
// once (Note [16-bit operands] in src/cpu/loops/strided_loop.h, src/cpu/half/widening.cpp), so each op
// must give, bit for bit, the float32 op on the widened inputs rounded to the 16-bit type. Sizes
// cross the 256-element blocks of the pointwise loops, and operands come contiguous, transposed and
// broadcast. Negative control: the same op without the rounding differs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>

#include "cpu/half/relu_16bit.h"
#include "support/test_util.h"
#include "support/thread_count.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

std::vector<float> floats(const Tensor& t) {
  return t.to(kFloat32).contiguous().tolist<float>();
}

// op on 16-bit inputs against op on their float32 widenings, rounded: bit for bit.
void expect_rounded_float_op(DType dtype, const std::vector<Tensor>& f32_inputs,
                             const std::function<Tensor(const std::vector<Tensor>&)>& op) {
  std::vector<Tensor> low, widened;
  for (const Tensor& t : f32_inputs) {
    low.push_back(t.to(dtype));
    widened.push_back(low.back().to(kFloat32));
  }
  const Tensor got = op(low);
  const Tensor want = op(widened);
  ASSERT_EQ(got.dtype(), want.dtype() == kFloat32 ? dtype : want.dtype());
  EXPECT_EQ(floats(got), floats(want.to(got.dtype())));
}

class Cpu16BitOps : public ::testing::TestWithParam<DType> {};

// Every 16-bit pattern once, in order (the index's bits), or permuted by an odd multiplier.
Tensor all_bit_patterns(DType dtype, uint32_t multiplier = 1) {
  Tensor t = empty({65536}, dtype);
  auto* bits = static_cast<uint16_t*>(t.data_ptr());
  for (uint32_t i = 0; i < 65536; ++i) bits[i] = static_cast<uint16_t>(i * multiplier);
  return t;
}

std::vector<uint16_t> bit_patterns_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* bits = static_cast<const uint16_t*>(c.data_ptr());
  return std::vector<uint16_t>(bits, bits + c.numel());
}

}  // namespace

TEST_P(Cpu16BitOps, UnaryOpsRoundOnce) {
  Generator gen(1);
  const Tensor x = randn({1000}, {}, &gen) * 3.0;
  using Op = Tensor (*)(const Tensor&);
  for (Op op : {static_cast<Op>(relu), static_cast<Op>(exp), static_cast<Op>(tanh), static_cast<Op>(sigmoid),
                static_cast<Op>(neg), static_cast<Op>(abs), static_cast<Op>(square)}) {
    expect_rounded_float_op(GetParam(), {x}, [op](const std::vector<Tensor>& t) { return op(t[0]); });
  }
  // Strided: a transposed view, and an in-place update.
  const Tensor m = randn({37, 29}, {}, &gen);
  expect_rounded_float_op(GetParam(), {m}, [](const std::vector<Tensor>& t) { return tanh(t[0].t()); });
  expect_rounded_float_op(GetParam(), {m}, [](const std::vector<Tensor>& t) { return t[0].clone().mul_(0.375); });
}

TEST_P(Cpu16BitOps, BinaryCompareAndClamp) {
  Generator gen(2);
  const Tensor a = randn({19, 300}, {}, &gen), b = randn({19, 300}, {}, &gen), row = randn({300}, {}, &gen);
  using Bin = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<Bin> ops = {
      [](const Tensor& u, const Tensor& v) { return u + v; }, [](const Tensor& u, const Tensor& v) { return u - v; },
      [](const Tensor& u, const Tensor& v) { return u * v; }, [](const Tensor& u, const Tensor& v) { return u / v; }};
  for (const Bin& op : ops) {
    expect_rounded_float_op(GetParam(), {a, b}, [op](const std::vector<Tensor>& t) { return op(t[0], t[1]); });
    expect_rounded_float_op(GetParam(), {a, row}, [op](const std::vector<Tensor>& t) { return op(t[0], t[1]); });
    expect_rounded_float_op(GetParam(), {a, b}, [op](const std::vector<Tensor>& t) { return op(t[0].t(), t[1].t()); });
  }
  // Numbers that the 16-bit types hold exactly: a number meets a 16-bit tensor in the tensor's type.
  expect_rounded_float_op(GetParam(), {a}, [](const std::vector<Tensor>& t) { return t[0] * 1.75; });
  expect_rounded_float_op(GetParam(), {a}, [](const std::vector<Tensor>& t) { return t[0] + 0.25; });
  expect_rounded_float_op(GetParam(), {a, b}, [](const std::vector<Tensor>& t) { return gt(t[0], t[1]); });
  expect_rounded_float_op(GetParam(), {a}, [](const std::vector<Tensor>& t) { return clamp(t[0], -0.5, 0.25); });
  expect_rounded_float_op(GetParam(), {a, b},
                          [](const std::vector<Tensor>& t) { return where(gt(t[0], 0.0), t[0], t[1]); });
}

TEST_P(Cpu16BitOps, ReductionsSoftmaxAndLayerNorm) {
  Generator gen(3);
  const Tensor x = randn({23, 310}, {}, &gen);
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return sum(t[0]); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return mean(t[0], {1}); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return sum(t[0], {0}); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return max(t[0]); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return softmax(t[0], 1); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return log_softmax(t[0], 0); });
  expect_rounded_float_op(
      GetParam(), {x}, [](const std::vector<Tensor>& t) { return layer_norm(t[0], {310}, Tensor(), Tensor(), 1e-5); });
}

// Note [16-bit column sums]: sums and means over a middle dim (several outer blocks, strips of
// columns, a thread each) have the bits of the float32 reduction rounded once.
TEST_P(Cpu16BitOps, ColumnSumsHaveTheFloat32Bits) {
  Generator gen(5);
  const Tensor x = randn({3, 257, 700}, {}, &gen);
  tapegrad::testing::ThreadCount two_threads(2);
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return sum(t[0], {1}); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return mean(t[0], {1}); });
  expect_rounded_float_op(GetParam(), {x}, [](const std::vector<Tensor>& t) { return sum(t[0], {0, 1}); });
}

// Note [16-bit relu]: relu and its backward select on the bits, and give the float path's bits for
// every pattern: zeros, subnormals, infinities and NaNs of either sign. The kernels are called
// directly so that the check cannot pass by the public op taking the float path; a transposed
// operand is refused, and takes that path.
TEST_P(Cpu16BitOps, ReluSelectsTheFloatPathsBitsForEveryPattern) {
  const DType dtype = GetParam();
  const Tensor x = all_bit_patterns(dtype), g = all_bit_patterns(dtype, 40503);
  const Tensor x32 = x.to(kFloat32), g32 = g.to(kFloat32);

  Tensor y = empty({65536}, dtype);
  ASSERT_TRUE(cpu::relu_16bit(x, y));
  const Tensor want_y = relu(x32).to(dtype);
  EXPECT_EQ(bit_patterns_of(y), bit_patterns_of(want_y));
  EXPECT_EQ(bit_patterns_of(relu(x)), bit_patterns_of(want_y));

  Tensor grad_x = empty({65536}, dtype);
  ASSERT_TRUE(cpu::relu_backward_16bit(g, x, grad_x));
  const Tensor want_grad = where(gt(x32, 0.0), g32, zeros_like(g32)).to(dtype);
  EXPECT_EQ(bit_patterns_of(grad_x), bit_patterns_of(want_grad));

  // Through autograd, on a [256, 256] view of the patterns with its gradient permuted.
  Tensor leaf = x.reshape({256, 256}).clone().requires_grad_();
  relu(leaf).backward(g.reshape({256, 256}));
  EXPECT_EQ(bit_patterns_of(leaf.grad()), bit_patterns_of(want_grad));

  // Refused: a transposed view, mixed dtypes. The float path then gives the same bits.
  const Tensor square_x = x.reshape({256, 256});
  Tensor out = empty({256, 256}, dtype);
  EXPECT_FALSE(cpu::relu_16bit(square_x.t(), out));
  EXPECT_FALSE(cpu::relu_16bit(x32, empty({65536}, kFloat32)));
  EXPECT_FALSE(cpu::relu_backward_16bit(g32, x, grad_x));
  EXPECT_EQ(bit_patterns_of(relu(square_x.t())), bit_patterns_of(want_y.reshape({256, 256}).t()));
}

// Gradients of 16-bit tensors are 16-bit, and match the float32 computation rounded.
TEST_P(Cpu16BitOps, BackwardGivesGradientsOfTheInputsType) {
  Generator gen(4);
  const Tensor x32 = randn({40, 70}, {}, &gen);
  Tensor x = x32.to(GetParam()).requires_grad_();
  sum(tanh(x) * 2.0).backward();
  ASSERT_EQ(x.grad().dtype(), GetParam());
  Tensor w = x.detach().to(kFloat32).requires_grad_();
  sum(tanh(w) * 2.0).backward();
  // Each op rounds its own result, so the chain is close to, not equal to, the float32 one.
  EXPECT_LT((x.grad().to(kFloat32) - w.grad()).abs().max().item(), 2e-2);
}

// Matrix products of 16-bit tensors: float32 sums of the exact 16-bit values, rounded once.
TEST_P(Cpu16BitOps, MatrixProducts) {
  Generator gen(5);
  const Tensor a = randn({33, 70}, {}, &gen), b = randn({70, 41}, {}, &gen);
  const Tensor la = a.to(GetParam()), lb = b.to(GetParam());
  const Tensor got = mm(la, lb), got_t = mm(lb.t(), la.t());
  ASSERT_EQ(got.dtype(), GetParam());
  const Tensor want = mm(la.to(kFloat64), lb.to(kFloat64));
  const double scale = want.abs().max().item();
  // Within the 16-bit rounding of the result (bf16: 2^-9 relative; f16 finer) plus the f32 sums'.
  EXPECT_LT((got.to(kFloat64) - want).abs().max().item(), std::ldexp(scale, -8));
  EXPECT_LT((got_t.t().to(kFloat64) - want).abs().max().item(), std::ldexp(scale, -8));
  // Negative control: the unrounded float32 operands give a visibly different product.
  EXPECT_GT((mm(a, b).to(kFloat64) - want).abs().max().item(), 1e-4);
  // linear with all three of one 16-bit type, and with a bias.
  const Tensor bias = randn({41}, {}, &gen).to(GetParam());
  const Tensor y = linear(la, lb.t().contiguous(), bias);
  ASSERT_EQ(y.dtype(), GetParam());
  EXPECT_LT((y.to(kFloat64) - (want + bias.to(kFloat64))).abs().max().item(), std::ldexp(scale, -7));
  // Several panels of B, packed by more than one thread, and each operand by rows and by columns.
  const Tensor c = randn({300, 70}, {}, &gen).to(GetParam()), d = randn({257, 300}, {}, &gen).to(GetParam());
  const Tensor want_cd = mm(c.t().to(kFloat64), d.t().to(kFloat64));
  const double scale_cd = want_cd.abs().max().item();
  for (const Tensor& got_cd : {mm(c.t(), d.t()), mm(c.t().contiguous(), d.t().contiguous()),
                               mm(c.t().contiguous(), d.t()), mm(c.t(), d.t().contiguous())}) {
    ASSERT_EQ(got_cd.dtype(), GetParam());
    EXPECT_LT((got_cd.to(kFloat64) - want_cd).abs().max().item(), std::ldexp(scale_cd, -8));
  }
  // Many rows, and a depth of more than one of the kernels' depth blocks (the partial sums stay
  // float32, the last block rounds), accumulating onto a bias.
  for (int64_t depth : {64, 1100}) {
    const Tensor e = randn({700, depth}, {}, &gen).to(GetParam()), f = randn({depth, 300}, {}, &gen).to(GetParam());
    const Tensor row = randn({300}, {}, &gen).to(GetParam());
    const Tensor want_ef = addmm(row.to(kFloat64), e.to(kFloat64), f.to(kFloat64), 1.0, 0.5);
    const Tensor got_ef = addmm(row, e, f, 1.0, 0.5);
    ASSERT_EQ(got_ef.dtype(), GetParam());
    EXPECT_LT((got_ef.to(kFloat64) - want_ef).abs().max().item(), std::ldexp(want_ef.abs().max().item(), -8)) << depth;
    // Rounded once: the bf16 result is the float32 product's, rounded (up to the sums' order).
    const Tensor f32 = addmm(row.to(kFloat32), e.to(kFloat32), f.to(kFloat32), 1.0, 0.5);
    if (GetParam() == kBFloat16)
      EXPECT_LT((got_ef.to(kFloat32) - f32.to(kBFloat16).to(kFloat32)).abs().max().item(),
                std::ldexp(want_ef.abs().max().item(), -7));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Cpu16BitOps, ::testing::Values(kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The autocast policy (amp/autocast.h): the products' ops return bf16, the float32 list returns
// float32, mixed inputs are promoted, and gradients reach float32 parameters as float32.
TEST(Cpu16BitAutocast, OpPolicy) {
  Generator gen(6);
  Tensor x = randn({8, 20}, {}, &gen), w = randn({12, 20}, {}, &gen).requires_grad_(),
         b = randn({12}, {}, &gen).requires_grad_();
  Tensor target = tensor<int64_t>({0, 3, 5, 11, 2, 2, 7, 9});
  Tensor loss;
  {
    amp::AutocastGuard guard(kCPU, kBFloat16);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), kBFloat16);
    EXPECT_EQ(mm(x, w.t()).dtype(), kBFloat16);
    EXPECT_EQ(matmul(y, ones({12, 3})).dtype(), kBFloat16);  // a bf16 and a float32 operand
    EXPECT_EQ(addmm(b, x, w.t()).dtype(), kBFloat16);
    EXPECT_EQ(bmm(x.reshape({2, 4, 20}), ones({2, 20, 3})).dtype(), kBFloat16);
    EXPECT_EQ(matmul(x.reshape({2, 4, 20}), ones({2, 20, 3}).to(kBFloat16)).dtype(), kBFloat16);
    Tensor h = relu(y);
    EXPECT_EQ(h.dtype(), kBFloat16);  // not on either list: runs in its input's type
    EXPECT_EQ(softmax(h, 1).dtype(), kFloat32);
    EXPECT_EQ(log_softmax(h, 1).dtype(), kFloat32);
    EXPECT_EQ(sum(h).dtype(), kFloat32);
    EXPECT_EQ(mean(h).dtype(), kFloat32);
    EXPECT_EQ(layer_norm(h, {12}, Tensor(), Tensor(), 1e-5).dtype(), kFloat32);
    EXPECT_EQ(mse_loss(h, zeros({8, 12})).dtype(), kFloat32);
    EXPECT_EQ((h + ones({8, 12})).dtype(), kFloat32);  // promoted, as PyTorch does
    loss = cross_entropy(h, target);
    EXPECT_EQ(loss.dtype(), kFloat32);
  }
  loss.backward();
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  // Outside the guard nothing changes (the negative control).
  EXPECT_EQ(linear(x, w, b).dtype(), kFloat32);
  EXPECT_EQ(sum(relu(x.to(kBFloat16))).dtype(), kBFloat16);
}

// A bf16 model under autocast trains like the float32 one: a two-layer MLP's Adam steps.
TEST(Cpu16BitAutocast, MlpLossFallsLikeFloat32) {
  auto run = [](bool autocast) {
    Generator gen(7);
    nn::Sequential model(nn::Linear(30, 64), nn::ReLU(), nn::Linear(64, 5));
    {
      Generator init(8);
      for (Tensor& p : model.parameters()) {
        autograd::NoGradGuard no_grad;
        p.copy_(randn(p.sizes(), {}, &init) * 0.2);
      }
    }
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    Tensor x = randn({64, 30}, {}, &gen), target = randint(0, 5, {64}, TensorOptions(kInt64), &gen);
    std::vector<double> losses;
    for (int step = 0; step < 40; ++step) {
      Tensor loss;
      {
        std::optional<amp::AutocastGuard> guard;
        if (autocast) guard.emplace(kCPU, kBFloat16);
        loss = cross_entropy(model(x), target);
      }
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
    return losses;
  };
  const std::vector<double> f32 = run(false), bf16 = run(true);
  EXPECT_LT(bf16.back(), 0.3 * bf16.front());
  EXPECT_NEAR(bf16.front(), f32.front(), 2e-2);
  EXPECT_NEAR(bf16.back(), f32.back(), 0.1 * f32.front());
  EXPECT_NE(bf16, f32);  // negative control: the products really ran in bf16
}
