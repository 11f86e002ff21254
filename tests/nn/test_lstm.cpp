// The fused LSTM layer op against an independent reference: the same recurrence written step by
// step with basic ops through autograd. Forward and gradients in f32, and gradcheck in f64, for
// forward and reverse directions and variable-length batches.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/weight_layouts.h"
#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/kernels/lstm_split.h"
#include "support/multiply_add_contraction.h"
#include "support/test_util.h"
#include "support/thread_count.h"

namespace tapegrad {
namespace {

using testing::expect_error;

struct LstmInputs {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths;
};

LstmInputs make_inputs(int64_t T, int64_t B, int64_t I, int64_t H, DType dtype, bool with_lengths, uint64_t seed) {
  Generator g(seed);
  auto r = [&](Shape s, double scale) { return mul(randn(s, kFloat64, &g), scale).to(dtype).requires_grad_(); };
  LstmInputs in{r({T, B, I}, 1.0),  r({B, H}, 0.5),  r({B, H}, 0.5),  r({4 * H, I}, 0.4),
                r({4 * H, H}, 0.4), r({4 * H}, 0.2), r({4 * H}, 0.2), Tensor()};
  if (with_lengths) {
    std::vector<int64_t> lens;
    for (int64_t b = 0; b < B; ++b) lens.push_back(b == 0 ? T : std::max<int64_t>(0, T - 1 - b));
    in.lengths = tensor<int64_t>(lens);
  }
  return in;
}

// The recurrence written out with elementary differentiable ops.
LstmLayerOutput reference(const LstmInputs& in, bool reverse) {
  const int64_t T = in.x.size(0), B = in.x.size(1);
  Tensor h = in.h0, c = in.c0;
  std::vector<Tensor> outputs(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    int64_t t = reverse ? T - 1 - s : s;
    Tensor z = add(linear(in.x.select(0, t), in.w_ih, in.b_ih), linear(h, in.w_hh, in.b_hh));
    std::vector<Tensor> parts = chunk(z, 4, 1);
    Tensor i = sigmoid(parts[0]), f = sigmoid(parts[1]), g = tanh(parts[2]), o = sigmoid(parts[3]);
    Tensor c_new = add(mul(f, c), mul(i, g));
    Tensor h_new = mul(o, tanh(c_new));
    if (in.lengths.defined()) {
      Tensor m = lt(full({B, 1}, static_cast<double>(t), kInt64), in.lengths.view({B, 1})).to(in.x.dtype());
      h = add(mul(m, h_new), mul(1.0 - m, h));
      c = add(mul(m, c_new), mul(1.0 - m, c));
      outputs[static_cast<size_t>(t)] = mul(m, h_new);
    } else {
      h = h_new;
      c = c_new;
      outputs[static_cast<size_t>(t)] = h_new;
    }
  }
  return {stack(outputs, 0), h, c};
}

// A scalar that weighs every output differently, so each gradient is distinct.
Tensor objective(const LstmLayerOutput& r, uint64_t seed) {
  Generator g(seed);
  Tensor wo = randn(r.output.sizes(), r.output.dtype(), &g);
  Tensor wh = randn(r.h_n.sizes(), r.h_n.dtype(), &g);
  Tensor wc = randn(r.c_n.sizes(), r.c_n.dtype(), &g);
  return add(add(sum(mul(r.output, wo)), sum(mul(r.h_n, wh))), sum(mul(r.c_n, wc)));
}

// The layer's outputs and then the seven leaves' gradients under objective(seed), from a fused
// layer or from the reference (each leaf's gradient cleared first).
const char* const kResultNames[] = {"output", "h_n", "c_n", "dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh"};

std::vector<Tensor> results_of(const LstmInputs& in, const LstmLayerOutput& out, uint64_t seed) {
  const std::vector<Tensor> leaves{in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh};
  for (Tensor t : leaves) t.set_grad(Tensor());
  objective(out, seed).backward();
  std::vector<Tensor> results{out.output.detach(), out.h_n.detach(), out.c_n.detach()};
  for (const Tensor& t : leaves) results.push_back(t.grad());
  return results;
}
std::vector<Tensor> fused_results(const LstmInputs& in, bool reverse, uint64_t seed) {
  return results_of(in, lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths, reverse), seed);
}
std::vector<Tensor> reference_results(const LstmInputs& in, bool reverse, uint64_t seed) {
  return results_of(in, reference(in, reverse), seed);
}

double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  std::vector<double> va = testing::values(a), vb = testing::values(b);
  for (size_t i = 0; i < va.size(); ++i) {
    diff += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
}

struct Case {
  const char* name;
  bool reverse, lengths;
};

class LstmLayer : public ::testing::TestWithParam<Case> {};

TEST_P(LstmLayer, MatchesStepByStepReferenceInFloat32) {
  const Case& c = GetParam();
  LstmInputs in = make_inputs(6, 4, 5, 7, kFloat32, c.lengths, 11);
  LstmLayerOutput fused = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths, c.reverse);
  LstmLayerOutput ref = reference(in, c.reverse);
  EXPECT_LT(relative_error(fused.output, ref.output), 1e-5);
  EXPECT_LT(relative_error(fused.h_n, ref.h_n), 1e-5);
  EXPECT_LT(relative_error(fused.c_n, ref.c_n), 1e-5);

  std::vector<Tensor> leaves{in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh};
  objective(fused, 5).backward();
  std::vector<Tensor> fused_grads;
  for (Tensor& t : leaves) {
    fused_grads.push_back(t.grad());
    t.set_grad(Tensor());
  }
  objective(ref, 5).backward();
  const char* names[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
  for (size_t i = 0; i < leaves.size(); ++i)
    EXPECT_LT(relative_error(fused_grads[i], leaves[i].grad()), 1e-5) << "gradient of " << names[i];
}

TEST_P(LstmLayer, GradcheckInFloat64) {
  const Case& c = GetParam();
  LstmInputs in = make_inputs(4, 3, 2, 3, kFloat64, c.lengths, 12);
  Tensor lengths = in.lengths;
  bool reverse = c.reverse;
  auto result = autograd::gradcheck(
      [lengths, reverse](const std::vector<Tensor>& v) {
        LstmLayerOutput r = lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], lengths, reverse);
        return cat({r.output.reshape({-1}), r.h_n.reshape({-1}), r.c_n.reshape({-1})}, 0);
      },
      {in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh});
  EXPECT_TRUE(result.ok) << result.report;
}

// Large enough that the CPU runs the recurrence on two batch slices (Note [batch-parallel
// recurrence] in src/cpu/kernels/lstm.cpp): 22 rows split 11 + 11, neither a multiple of a GEMM tile, and
// with lengths some rows finish early or never start. Values and gradients must match the
// step-by-step reference, and the split must not change any number.
TEST_P(LstmLayer, BatchSlicesOnTwoThreadsMatchReferenceAndOneThread) {
  const Case& c = GetParam();
  const LstmInputs in = make_inputs(12, 22, 9, 40, kFloat32, c.lengths, 21);
  auto run = [&](int threads) {
    testing::ThreadCount thread_count(threads);
    return fused_results(in, c.reverse, 6);
  };
  const std::vector<Tensor> two = run(2), one = run(1), expected = reference_results(in, c.reverse, 6);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_LT(relative_error(two[i], expected[i]), 2e-5) << kResultNames[i];
    EXPECT_LT(relative_error(two[i], one[i]), 1e-6) << kResultNames[i] << ": one thread against two";
  }
}

// Tall batch slices make the weight gradients step by step (Note [weight gradients step by step]
// in src/cpu/kernels/lstm.cpp), and with x constant the gate gradients are not kept at all: both
// against the reference, on one thread (one slice of 256 rows) and on two (two of 128).
TEST_P(LstmLayer, TallBatchSlicesMatchReference) {
  const Case& c = GetParam();
  LstmInputs in = make_inputs(8, 256, 7, 12, kFloat32, c.lengths, 23);
  for (bool x_constant : {false, true}) {
    SCOPED_TRACE(x_constant ? "x constant" : "x requires grad");
    if (x_constant) in.x = in.x.detach();
    const std::vector<Tensor> expected = reference_results(in, c.reverse, 4);
    for (int threads : {1, 2}) {
      testing::ThreadCount thread_count(threads);
      if (cpu::sgemm_avx512_available())
        ASSERT_TRUE(cpu::lstm_weight_grads_by_step(8, 256, 12, 7, kFloat32)) << "the path this test means to exercise";
      const std::vector<Tensor> got = fused_results(in, c.reverse, 4);
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(got[i].defined(), expected[i].defined()) << kResultNames[i];
        if (got[i].defined()) EXPECT_LT(relative_error(got[i], expected[i]), 2e-5) << kResultNames[i];
      }
    }
  }
}

// Batch 1 takes its own path (Note [batch-1 recurrence split by hidden units] in
// src/cpu/kernels/lstm.cpp): threads share the hidden units, each multiplying its own packed
// columns. Shapes: a part ending in a partial vector (H = 72), three parts of uneven size
// (H = 136), parts of several panels (H = 272). Values and gradients match the step-by-step
// reference, and every thread count gives the same bits.
std::vector<double> all_values(const std::vector<Tensor>& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    std::vector<double> v = testing::values(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The batch-1 layer on 1 thread, then on each of `more` thread counts, must give the same bits,
// and the reference's values within 2e-5. expect_parts checks the team each count is allowed.
void check_batch_one(const LstmInputs& in, bool reverse, uint64_t seed, const std::vector<int>& more,
                     const std::function<void(int)>& expect_parts) {
  auto run = [&](int threads) {
    testing::ThreadCount thread_count(threads);
    cpu::lstm_split_forget_timings();  // so that the first calls take the split
    expect_parts(threads);
    return fused_results(in, reverse, seed);
  };
  const std::vector<Tensor> one = run(1);
  const std::vector<double> one_bits = all_values(one);
  for (int threads : more) EXPECT_TRUE(all_values(run(threads)) == one_bits) << threads << " threads";
  const std::vector<Tensor> expected = reference_results(in, reverse, seed);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_LT(relative_error(one[i], expected[i]), 2e-5) << kResultNames[i];
}

TEST_P(LstmLayer, BatchOneSplitByUnitsMatchesReferenceAndOneThreadBitForBit) {
  if (!cpu::lstm_batch1_path_applies(1, kFloat32, false)) GTEST_SKIP() << "no AVX-512: the batch-1 path is off";
  const Case& c = GetParam();
  struct Shape3 {
    int64_t steps, input, hidden;
  };
  for (const Shape3 shape : {Shape3{48, 9, 72}, Shape3{14, 9, 136}, Shape3{4, 9, 272}}) {
    SCOPED_TRACE("H = " + std::to_string(shape.hidden));
    LstmInputs in = make_inputs(shape.steps, 1, shape.input, shape.hidden, kFloat32, false, 41);
    if (c.lengths) in.lengths = tensor<int64_t>({shape.steps - 3});
    check_batch_one(in, c.reverse, 7, {2, 3}, [&](int threads) {
      EXPECT_EQ(cpu::lstm_batch1_parts(shape.steps, shape.hidden, shape.input),
                std::min<int64_t>(threads, shape.hidden / 32))
          << "the split this test means to exercise";
    });
  }
}

// Every hidden size at batch 1, down to one unit: panels with a partial vector, one panel or
// several, a team where the size allows one; against the reference and across thread counts.
TEST(LstmLayerOp, BatchOneEveryHiddenSize) {
  for (int64_t hidden : {1, 5, 16, 17, 33, 64, 100}) {
    SCOPED_TRACE("H = " + std::to_string(hidden));
    check_batch_one(make_inputs(40, 1, 3, hidden, kFloat32, false, 51), false, 8, {2}, [](int) {});
  }
}

// Two callers running batch-1 layers at once, each with its own team: the measured choice's
// registry and each call's barrier are shared by nobody else's steps, so every result has the bits
// of a lone run (each caller has its own copy of the inputs, whose gradients it writes).
TEST(LstmLayerOp, BatchOneFromTwoCallersAtOnce) {
  testing::ThreadCount thread_count(2);
  cpu::lstm_split_forget_timings();
  const std::vector<double> alone = all_values(fused_results(make_inputs(48, 1, 9, 72, kFloat32, false, 61), false, 9));
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 2; ++caller)
    callers.emplace_back([&, caller] {
      const LstmInputs in = make_inputs(48, 1, 9, 72, kFloat32, false, 61);
      for (int call = 0; call < 20; ++call) mismatches[caller] += all_values(fused_results(in, false, 9)) != alone;
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(mismatches[0] + mismatches[1], 0);
}

// Note [recurrent weights laid out as panels]: a layer with 1 MiB of weights or more reads them laid
// out as sgemm's panels in its batch-sliced forward and backward. Its outputs and every gradient have the bits of
// the same layer with the weights read in place, on one thread and two, forward and reversed with
// lengths, and its values stay within 2e-5 of the reference. The control: with the layout switched
// off the shape reads no panels, so both paths ran.
TEST(LstmLayerOp, WeightsLaidOutAsPanelsGiveTheSameBits) {
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512: the products are OpenBLAS's";
  const int64_t steps = 5, batch = 11, input = 40, hidden = 256;  // (40 + 256) x 1024 floats: 1.16 MiB
  for (int threads : {1, 2}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(std::to_string(threads) + " threads" + (reverse ? ", reversed with lengths" : ""));
      testing::ThreadCount thread_count(threads);
      const LstmInputs in = make_inputs(steps, batch, input, hidden, kFloat32, reverse, 71);
      ASSERT_TRUE(cpu::lstm_forward_reads_panels(steps, batch, hidden, input));
      ASSERT_TRUE(cpu::lstm_backward_reads_panels(steps, batch, hidden));  // W_hh: 1024 x 256 floats, 1 MiB
      const std::vector<Tensor> laid_out = fused_results(in, reverse, 3);
      cpu::set_lstm_weight_panels(false);
      EXPECT_FALSE(cpu::lstm_forward_reads_panels(steps, batch, hidden, input));
      EXPECT_FALSE(cpu::lstm_backward_reads_panels(steps, batch, hidden));
      const std::vector<Tensor> in_place = fused_results(in, reverse, 3);
      cpu::set_lstm_weight_panels(true);
      EXPECT_TRUE(all_values(laid_out) == all_values(in_place));
      if (threads == 1 && !reverse) {
        const std::vector<Tensor> expected = reference_results(in, reverse, 3);
        for (size_t i = 0; i < expected.size(); ++i)
          EXPECT_LT(relative_error(laid_out[i], expected[i]), 2e-5) << kResultNames[i];
      }
    }
  }
}

// Note [activations in AVX-512 registers]: the float forward cell with its activations in registers
// gives the bits of the compiler's vectorisation of them: a batch-sliced layer (11 rows) and a
// batch-1 layer, with H = 72 (a part ending in a partial vector), 16 (one full vector: plain loads
// only, vec512::for_each_vector) and 5 (one partial vector only), one thread and two, forward and reversed
// with lengths, outputs and every gradient, where the compiler fuses multiply-adds as the release
// build does (support/multiply_add_contraction.h). The control for the comparison is the test below.
TEST(LstmLayerOp, CellInRegistersGivesTheSameBits) {
  if (!testing::build_contracts_multiply_adds())
    GTEST_SKIP() << "this build does not fuse multiply-adds (-O1): its vectorised cell is not the release build's";
  for (int64_t hidden : {72, 16, 5})
    for (int64_t batch : {11, 1})
      for (int threads : {1, 2})
        for (bool reverse : {false, true}) {
          SCOPED_TRACE("H = " + std::to_string(hidden) + ", B = " + std::to_string(batch) + ", " +
                       std::to_string(threads) + " threads" + (reverse ? ", reversed with lengths" : ""));
          testing::ThreadCount thread_count(threads);
          cpu::lstm_split_forget_timings();
          const LstmInputs in = make_inputs(9, batch, 5, hidden, kFloat32, reverse, 73);
          const std::vector<Tensor> in_registers = fused_results(in, reverse, 3);
          cpu::set_lstm_cell_in_registers(false);
          cpu::lstm_split_forget_timings();
          const std::vector<Tensor> vectorised = fused_results(in, reverse, 3);
          cpu::set_lstm_cell_in_registers(true);
          EXPECT_TRUE(all_values(in_registers) == all_values(vectorised));
        }
}

// Negative control for the bit-for-bit comparison above: one ulp in one input is seen.
TEST(LstmLayerOp, BatchOneBitComparisonSeesOneUlp) {
  testing::ThreadCount thread_count(2);
  auto run = [](bool nudge) {
    LstmInputs in = make_inputs(48, 1, 9, 72, kFloat32, false, 41);
    if (nudge) {
      float* x = in.x.data<float>();
      x[5] = std::nextafter(x[5], 1.0f);
    }
    LstmLayerOutput out = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths, false);
    return all_values({out.output, out.h_n, out.c_n});
  };
  EXPECT_TRUE(run(false) == run(false));
  EXPECT_FALSE(run(false) == run(true));
}

// The batch-1 forward lays its weight panels out straight from contiguous weights (Note [panels laid
// out in place], lstm_weight_layout.cpp) and through the copy kernel from any others: weights held
// transposed in memory (views of [I, 4H] and [H, 4H] storage) give the contiguous weights' bits, on
// one thread and split. The control: one weight changed by 1e-3 gives other bits (a change of one
// ulp in one weight can round away in every output).
TEST(LstmLayerOp, BatchOneWeightsOfAnyLayoutGiveTheSameBits) {
  if (!cpu::lstm_batch1_path_applies(1, kFloat32, false)) GTEST_SKIP() << "no AVX-512: the batch-1 path is off";
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    testing::ThreadCount thread_count(threads);
    cpu::lstm_split_forget_timings();
    auto run = [](bool transposed, bool nudge) {
      LstmInputs in = make_inputs(48, 1, 9, 72, kFloat32, false, 43);
      if (nudge) {
        in.w_hh.data<float>()[7] += 1e-3f;
      }
      if (transposed) {
        in.w_ih = in.w_ih.detach().t().contiguous().t().requires_grad_();
        in.w_hh = in.w_hh.detach().t().contiguous().t().requires_grad_();
        EXPECT_FALSE(in.w_ih.is_contiguous() || in.w_hh.is_contiguous());
      }
      LstmLayerOutput out = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths, false);
      return all_values({out.output, out.h_n, out.c_n});
    };
    EXPECT_TRUE(run(true, false) == run(false, false));
    EXPECT_FALSE(run(true, true) == run(false, false));
  }
}

// A classifier reads only h_n: the output sequence's gradient is then the engine's broadcast
// zero, which the CPU recurrence skips rather than adds.
TEST_P(LstmLayer, OnlyTheFinalStateUsed) {
  const Case& c = GetParam();
  LstmInputs in = make_inputs(9, 12, 5, 24, kFloat32, c.lengths, 31);
  std::vector<Tensor> leaves{in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh};
  auto grads_of = [&](const LstmLayerOutput& r) {
    Generator g(7);
    sum(mul(r.h_n, randn(r.h_n.sizes(), r.h_n.dtype(), &g))).backward();
    std::vector<Tensor> grads;
    for (Tensor& t : leaves) {
      grads.push_back(t.grad());
      t.set_grad(Tensor());
    }
    return grads;
  };
  std::vector<Tensor> fused =
      grads_of(lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths, c.reverse));
  std::vector<Tensor> expected = grads_of(reference(in, c.reverse));
  const char* names[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
  for (size_t i = 0; i < leaves.size(); ++i)
    EXPECT_LT(relative_error(fused[i], expected[i]), 1e-5) << "gradient of " << names[i];
}

INSTANTIATE_TEST_SUITE_P(Ops, LstmLayer,
                         ::testing::Values(Case{"forward", false, false}, Case{"reverse", true, false},
                                           Case{"forward_lengths", false, true}, Case{"reverse_lengths", true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LstmLayerOp, PaddedStepsAreZeroAndKeepTheState) {
  LstmInputs in = make_inputs(5, 3, 2, 4, kFloat64, true, 13);  // lengths {5, 3, 2}
  LstmLayerOutput r = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.lengths);
  for (double v : testing::values(r.output.narrow(0, 3, 2).select(1, 1))) EXPECT_EQ(v, 0.0);
  testing::expect_close(r.h_n.select(0, 1), r.output.select(0, 2).select(0, 1), 0);
}

TEST(LstmLayerOp, BadInputsAreErrors) {
  LstmInputs in = make_inputs(3, 2, 4, 5, kFloat32, false, 14);
  expect_error([&] { lstm_layer(in.x.select(0, 0), in.h0, in.c0, in.w_ih, in.w_hh); }, {"lstm", "[T, B, I]"});
  expect_error([&] { lstm_layer(in.x, in.h0, in.c0, in.w_hh, in.w_hh); }, {"lstm", "weight_ih"});
  expect_error([&] { lstm_layer(in.x, in.h0.narrow(0, 0, 1), in.c0, in.w_ih, in.w_hh); }, {"lstm", "[1, 5]", "[2, 5]"});
  expect_error(
      [&] {
        lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, Tensor(), Tensor(), tensor<int64_t>({1, 9}));
      },
      {"lstm", "length 9"});
  expect_error([&] { lstm_layer(in.x.to(kFloat64), in.h0, in.c0, in.w_ih, in.w_hh); }, {"lstm", "float32"});
}

}  // namespace
}  // namespace tapegrad

namespace tapegrad {
namespace {

std::vector<std::string> parameter_names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(LSTMModule, PyTorchParameterNamesAndShapes) {
  nn::LSTM lstm(3, 4, nn::LSTMOptions().num_layers(2).bidirectional(true));
  EXPECT_EQ(
      parameter_names(lstm),
      (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse",
                                "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1",
                                "weight_hh_l1", "bias_ih_l1", "bias_hh_l1", "weight_ih_l1_reverse",
                                "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"}));
  StateDict params = lstm.named_parameters();
  EXPECT_EQ(params[0].second.sizes(), (Shape{16, 3}));
  EXPECT_EQ(params[8].second.sizes(), (Shape{16, 8}));  // layer 1 reads both directions
  for (const auto& [n, t] : params)
    for (double v : testing::values(t)) EXPECT_LE(std::fabs(v), 0.5);  // U(-1/sqrt(4), 1/sqrt(4))
}

TEST(LSTMModule, VariableLengthEqualsEachSequenceAlone) {
  manual_seed(21);
  nn::LSTM lstm(3, 5, nn::LSTMOptions().num_layers(2).bidirectional(true));
  lstm.to(kFloat64);
  const int64_t T = 6;
  Tensor x = randn({T, 3, 3}, kFloat64);
  std::vector<int64_t> lens{6, 4, 1};
  nn::LSTMOutput packed = lstm.forward(x, Tensor(), Tensor(), tensor<int64_t>(lens));
  for (int64_t b = 0; b < 3; ++b) {
    nn::LSTMOutput alone = lstm.forward(x.narrow(0, 0, lens[b]).narrow(1, b, 1));
    testing::expect_close(packed.output.narrow(0, 0, lens[b]).narrow(1, b, 1), alone.output, 1e-12);
    testing::expect_close(packed.h_n.narrow(1, b, 1), alone.h_n, 1e-12);
    testing::expect_close(packed.c_n.narrow(1, b, 1), alone.c_n, 1e-12);
  }
  for (double v : testing::values(packed.output.narrow(0, 1, T - 1).select(1, 2))) EXPECT_EQ(v, 0.0);
}

TEST(LSTMModule, BatchFirstIsATranspose) {
  manual_seed(22);
  nn::LSTM a(2, 3), b(2, 3, nn::LSTMOptions().batch_first(true));
  b.load_state_dict(a.state_dict());
  Tensor x = randn({4, 5, 2});
  testing::expect_close(b.forward(x.transpose(0, 1)).output.transpose(0, 1), a.forward(x).output, 1e-6);
}

TEST(LSTMModule, GradcheckTwoLayersBidirectionalWithLengths) {
  manual_seed(23);
  nn::LSTM lstm(2, 2, nn::LSTMOptions().num_layers(2).bidirectional(true));
  lstm.to(kFloat64);
  Tensor x = randn({3, 2, 2}, kFloat64).requires_grad_();
  Tensor h0 = randn({4, 2, 2}, kFloat64).requires_grad_();
  std::vector<Tensor> inputs{x, h0};
  for (Tensor& p : lstm.parameters()) inputs.push_back(p);
  Tensor lengths = tensor<int64_t>({3, 2});
  auto result = autograd::gradcheck(
      [&](const std::vector<Tensor>& v) {
        nn::LSTMOutput r = lstm.forward(v[0], v[1], Tensor(), lengths);
        return cat({r.output.reshape({-1}), r.h_n.reshape({-1}), r.c_n.reshape({-1})}, 0);
      },
      inputs);
  EXPECT_TRUE(result.ok) << result.report;
}

TEST(LSTMModule, CellMatchesOneStepOfTheLayer) {
  manual_seed(24);
  nn::LSTMCell cell(3, 4);
  Tensor x = randn({2, 3}), h = randn({2, 4}), c = randn({2, 4});
  auto [h1, c1] = cell.forward(x, h, c);
  LstmLayerOutput r = lstm_layer(x.unsqueeze(0), h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh);
  testing::expect_close(h1, r.h_n, 0);
  testing::expect_close(c1, r.c_n, 0);
}

TEST(Training, TinyLstmLearnsToCountSigns) {
  // Class = whether more of the 8 steps had a positive first feature than not: needs memory.
  manual_seed(25);
  Tensor x = randn({8, 128, 2});
  Tensor y = gt(sum(gt(x.select(2, 0), 0.0).to(kFloat32), {0}), 4.0).to(kInt64);
  nn::LSTM lstm(2, 16);
  nn::Linear head(16, 2);
  std::vector<Tensor> params = lstm.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  optim::Adam opt(params, optim::AdamOptions(2e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor loss = cross_entropy(head(lstm.forward(x).h_n.select(0, 0)), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 0.5);
  EXPECT_LT(last, 0.25);
}

// Note [kept weight layouts]: inside a WeightLayoutScope the CPU recurrence reuses the weight
// layouts it made, and must make a fresh one whenever a weight has been written; outside any scope
// every call makes its own.
struct LayoutRun {
  Tensor output, grad_w_hh;
};

LayoutRun run_layer(const LstmInputs& in) {
  for (const Tensor* t : {&in.x, &in.h0, &in.c0, &in.w_ih, &in.w_hh, &in.b_ih, &in.b_hh})
    if (t->grad().defined()) t->grad().zero_();
  LstmLayerOutput out = lstm_layer(in.x, in.h0, in.c0, in.w_ih, in.w_hh, in.b_ih, in.b_hh, Tensor(), false);
  sum(mul(out.output, out.output)).backward();
  return {out.output.detach().clone(), in.w_hh.grad().clone()};
}

// The same layer on fresh copies of the weights, with no layouts kept: what any call must give.
LayoutRun run_on_copies(const LstmInputs& in) {
  backend::WeightLayoutScope none(nullptr);
  LstmInputs fresh = in;
  for (Tensor* t : {&fresh.w_ih, &fresh.w_hh, &fresh.b_ih, &fresh.b_hh}) *t = t->detach().clone().requires_grad_();
  fresh.x = in.x.detach().requires_grad_();
  return run_layer(fresh);
}

// Bit for bit (no NaN arises here).
bool equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && allclose(a, b, 0.0, 0.0);
}

void expect_same(const LayoutRun& got, const LayoutRun& want, const std::string& what) {
  EXPECT_TRUE(equal(got.output, want.output)) << what << ": output";
  EXPECT_TRUE(equal(got.grad_w_hh, want.grad_w_hh)) << what << ": grad of weight_hh";
}

int64_t made_since(const backend::WeightLayoutCounts& before) {
  return backend::weight_layout_counts().made - before.made;
}
int64_t reused_since(const backend::WeightLayoutCounts& before) {
  return backend::weight_layout_counts().reused - before.reused;
}

TEST(LstmWeightLayouts, ReusedInsideAScopeWhileTheWeightsAreUnchanged) {
  for (bool bf16 : {false, true}) {
    std::optional<amp::AutocastGuard> autocast;
    if (bf16) autocast.emplace(kCPU, kBFloat16);
    LstmInputs in = make_inputs(6, 5, 7, 16, kFloat32, false, bf16 ? 41 : 40);
    backend::WeightLayoutScope scope(std::make_shared<backend::WeightLayouts>());
    const backend::WeightLayoutCounts before = backend::weight_layout_counts();
    LayoutRun first = run_layer(in);
    LayoutRun second = run_layer(in);
    // The forward's layout is made once and reused; under autocast, the backward's too.
    EXPECT_EQ(made_since(before), bf16 ? 2 : 1) << "bf16 " << bf16;
    EXPECT_EQ(reused_since(before), bf16 ? 2 : 1) << "bf16 " << bf16;
    const std::string kind = bf16 ? ", bf16" : "";
    expect_same(second, first, "second call" + kind);
    expect_same(second, run_on_copies(in), "against fresh weights" + kind);
  }
}

TEST(LstmWeightLayouts, OutsideAScopeEveryCallMakesItsOwn) {
  // A write through the data pointer bumps no version: outside a scope it is still seen.
  LstmInputs in = make_inputs(6, 5, 7, 16, kFloat32, false, 45);
  const backend::WeightLayoutCounts before = backend::weight_layout_counts();
  LayoutRun first = run_layer(in);
  static_cast<float*>(in.w_hh.data_ptr())[3] += 0.5f;
  LayoutRun second = run_layer(in);
  EXPECT_EQ(made_since(before), 0);
  EXPECT_EQ(reused_since(before), 0);
  EXPECT_FALSE(equal(second.output, first.output));
  expect_same(second, run_on_copies(in), "after a raw write");
}

TEST(LstmWeightLayouts, EveryWriteToAWeightMakesAFreshLayout) {
  for (bool bf16 : {false, true}) {
    std::optional<amp::AutocastGuard> autocast;
    if (bf16) autocast.emplace(kCPU, kBFloat16);
    LstmInputs in = make_inputs(6, 5, 7, 16, kFloat32, false, 42);
    backend::WeightLayoutScope scope(std::make_shared<backend::WeightLayouts>());
    // Control: each write below changes the result, so a stale layout would be seen.
    const std::vector<std::pair<const char*, std::function<void()>>> writes = {
        {"weight_ih add_",
         [&] {
           NoGradGuard g;
           in.w_ih.add_(0.25);
         }},
        {"weight_hh mul_",
         [&] {
           NoGradGuard g;
           in.w_hh.mul_(-1.0);
         }},
        {"bias_hh copy_",
         [&] {
           NoGradGuard g;
           in.b_hh.copy_(full({64}, 0.5));
         }},
        {"optimizer step",
         [&] {
           optim::SGD opt({in.w_ih, in.w_hh, in.b_ih, in.b_hh}, optim::SGDOptions(0.5));
           opt.step();  // the gradients of the last run
         }},
    };
    LayoutRun previous = run_layer(in);
    for (const auto& [what, write] : writes) {
      write();
      LayoutRun now = run_layer(in);
      EXPECT_FALSE(equal(now.output, previous.output)) << what << ": the control did not change the output";
      expect_same(now, run_on_copies(in), std::string(what) + (bf16 ? ", bf16" : ""));
      previous = now;
    }
  }
}

TEST(LstmWeightLayouts, NewWeightsInTheSameShapeAreNotConfused) {
  // Layouts of freed weights are dropped, and a new tensor (maybe at the freed address) is new.
  backend::WeightLayoutScope scope(std::make_shared<backend::WeightLayouts>());
  LayoutRun first;
  {
    LstmInputs a = make_inputs(4, 3, 5, 8, kFloat32, false, 43);
    first = run_layer(a);
  }
  LstmInputs b = make_inputs(4, 3, 5, 8, kFloat32, false, 44);
  LayoutRun second = run_layer(b);
  EXPECT_FALSE(equal(first.output, second.output));
  expect_same(second, run_on_copies(b), "new weights");
}

TEST(LstmWeightLayouts, ACheckpointedModuleSharesLayoutsAcrossItsForwardRuns) {
  // Two layers, both directions, four runs of steps: a direction's four forward runs read one
  // layout; each recomputation in backward makes its own (none is live at the backward's peak);
  // the next step, after the optimiser, starts anew.
  manual_seed(46);
  nn::LSTM lstm(5, 8, nn::LSTMOptions().num_layers(2).bidirectional(true).checkpoint_segments(4));
  optim::SGD opt(lstm.parameters(), optim::SGDOptions(0.1));
  Tensor x = randn({12, 3, 5});
  for (int step = 0; step < 2; ++step) {
    backend::WeightLayoutCounts before = backend::weight_layout_counts();
    Tensor loss = sum(lstm.forward(x).output);
    EXPECT_EQ(made_since(before), 4) << "step " << step;
    EXPECT_EQ(reused_since(before), 4 * 3) << "step " << step;
    before = backend::weight_layout_counts();
    opt.zero_grad();
    loss.backward();
    opt.step();
    EXPECT_EQ(made_since(before), 0) << "step " << step;
    EXPECT_EQ(reused_since(before), 0) << "step " << step;
  }
}
}  // namespace
}  // namespace tapegrad
