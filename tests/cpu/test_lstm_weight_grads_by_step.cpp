// The CPU's lstm_recurrence_backward_weights slot (Note [weight gradients step by step] in
// src/cpu/kernels/lstm.cpp): at batch slices of 8 rows and more it takes the call, gives the plain
// backward's state, gate and bias gradients bit for bit, and weight gradients equal to the products
// over all steps (computed here in double), whether a slice's steps are gathered into groups (10
// rows a step: groups of 13 steps and a last, shorter one) or each step is a product of its own;
// with the gate gradients not kept (each step's then written straight into its group) it gives the
// same weights, state and bias gradients; calls again, of other shapes in between or from two
// threads at once, give the same bits (each thread's partial sums live in a buffer of its own:
// Note [partial sums added by their threads]); below 8 rows (batch 1 aside) and where the partial
// sum would not fit in half an L2 it declines and writes nothing. At batch 1 it makes the weight
// gradients beside the recurrence, on a second thread (Note [weight gradients beside the batch-1
// recurrence]), with the same bits on any number of threads.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "backend/kernel_table.h"
#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/kernels/lstm_split.h"
#include "support/test_util.h"
#include "support/thread_count.h"

namespace tapegrad {
namespace {

struct Shape4 {
  int64_t steps, batch, input, hidden;
};

struct Inputs {
  Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0, lengths;
  Tensor g_out, g_h, g_c;  // incoming gradients
};

Inputs make(const Shape4& s, bool with_lengths, uint64_t seed) {
  Generator g(seed);
  auto r = [&](Shape shape, double scale) { return mul(randn(shape, kFloat32, &g), scale); };
  const int64_t T = s.steps, B = s.batch, I = s.input, H = s.hidden;
  Inputs in{r({T, B, I}, 1.0), r({4 * H, I}, 0.4), r({4 * H, H}, 0.4), r({4 * H}, 0.2), r({4 * H}, 0.2), r({B, H}, 0.5),
            r({B, H}, 0.5),    Tensor(),           r({T, B, H}, 1.0),  r({B, H}, 1.0),  r({B, H}, 1.0)};
  if (with_lengths) {
    std::vector<int64_t> lens;
    for (int64_t b = 0; b < B; ++b) lens.push_back(b % (T + 1));
    in.lengths = tensor<int64_t>(lens);
  }
  return in;
}

struct States {
  Tensor gates, h_all, c_all;
};

States forward(const Inputs& in, bool reverse) {
  const int64_t T = in.x.size(0), B = in.x.size(1), H = in.w_hh.size(1);
  States st{empty({T, B, 4 * H}), empty({T, B, H}), empty({T, B, H})};
  backend::kernels(DeviceKind::CPU)
      .lstm_recurrence_forward(in.x, in.w_ih, in.w_hh, in.b_ih, in.b_hh, in.h0, in.c0, st.gates, st.h_all, st.c_all,
                               in.lengths, reverse, kFloat32);
  return st;
}

struct Grads {
  Tensor dh, dc, dgates, db_ih, db_hh, dw_ih, dw_hh;
  bool done = false;
};

Grads fresh(const Shape4& s, bool keep_gates) {
  const int64_t T = s.steps, B = s.batch, I = s.input, H = s.hidden;
  return {full({B, H}, 7.0),    full({B, H}, 7.0),  keep_gates ? full({T, B, 4 * H}, 7.0) : Tensor(),
          full({4 * H}, 7.0),   full({4 * H}, 7.0), full({4 * H, I}, 7.0),
          full({4 * H, H}, 7.0)};
}

Grads plain(const Shape4& s, const Inputs& in, const States& st, bool reverse) {
  Grads g = fresh(s, true);
  backend::kernels(DeviceKind::CPU)
      .lstm_recurrence_backward(st.gates, in.w_hh, in.c0, st.c_all, in.g_out, in.g_h, in.g_c, g.dh, g.dc, g.dgates,
                                g.db_ih, g.db_hh, in.lengths, reverse, kFloat32);
  return g;
}

Grads by_step(const Shape4& s, const Inputs& in, const States& st, bool reverse, bool keep_gates) {
  Grads g = fresh(s, keep_gates);
  auto slot = backend::kernels(DeviceKind::CPU).lstm_recurrence_backward_weights;
  EXPECT_NE(slot, nullptr);
  if (slot != nullptr)
    slot(st.gates, in.w_hh, in.x, in.h0, st.h_all, in.c0, st.c_all, in.g_out, in.g_h, in.g_c, g.dh, g.dc, g.dgates,
         g.db_ih, g.db_hh, g.dw_ih, g.dw_hh, in.lengths, reverse, &g.done);
  return g;
}

// h_prev(t) for every t, [T, B, H]: h0 where the sequence starts, else the neighbouring step's state.
Tensor previous_states(const Inputs& in, const States& st, bool reverse) {
  const int64_t T = in.x.size(0);
  std::vector<Tensor> prev;
  for (int64_t t = 0; t < T; ++t) {
    const bool first = reverse ? t == T - 1 : t == 0;
    prev.push_back(first ? in.h0 : st.h_all.select(0, reverse ? t + 1 : t - 1));
  }
  return stack(prev, 0);
}

// sum over rows of dgates^T m, in double: [4H, cols].
Tensor product_over_steps(const Tensor& dgates, const Tensor& m) {
  const int64_t rows = dgates.size(0) * dgates.size(1);
  return matmul(dgates.reshape({rows, dgates.size(2)}).to(kFloat64).t(), m.reshape({rows, m.size(2)}).to(kFloat64));
}

double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = testing::values(a), vb = testing::values(b);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    diff += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return testing::values(a) == testing::values(b);
}

// The recurrence's own gradients (states, gates, biases) have the plain backward's bits, and the
// weight gradients are the products over all steps (computed in double) within float rounding.
void expect_plain_bits_and_weights(const Grads& got, const Grads& want, const Inputs& in, const States& st,
                                   bool reverse) {
  EXPECT_TRUE(same_bits(got.dh, want.dh));
  EXPECT_TRUE(same_bits(got.dc, want.dc));
  if (got.dgates.defined()) EXPECT_TRUE(same_bits(got.dgates, want.dgates));
  EXPECT_TRUE(same_bits(got.db_ih, want.db_ih));
  EXPECT_TRUE(same_bits(got.db_hh, want.db_hh));
  EXPECT_LT(relative_error(got.dw_ih, product_over_steps(want.dgates, in.x)), 1e-6);
  EXPECT_LT(relative_error(got.dw_hh, product_over_steps(want.dgates, previous_states(in, st, reverse))), 1e-6);
}

// With the gate gradients not kept (each step's then written where the weights' products read
// them), the call gives the same bits as with them kept.
void expect_same_without_kept_gates(const Shape4& shape, const Inputs& in, const States& st, bool reverse,
                                    const Grads& kept, const Grads& want) {
  const Grads unkept = by_step(shape, in, st, reverse, /*keep_gates=*/false);
  ASSERT_TRUE(unkept.done);
  EXPECT_TRUE(same_bits(unkept.dw_ih, kept.dw_ih));
  EXPECT_TRUE(same_bits(unkept.dw_hh, kept.dw_hh));
  expect_plain_bits_and_weights(unkept, want, in, st, reverse);
}

TEST(LstmWeightGradsByStep, TakesTheCallAndMatchesTheProductsOverAllSteps) {
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512: the slot always declines";
  for (const Shape4 shape : {Shape4{5, 260, 9, 20}, Shape4{40, 20, 9, 20}})
    for (int threads : {1, 2}) {
      testing::ThreadCount thread_count(threads);
      for (bool reverse : {false, true}) {
        for (bool lengths : {false, true}) {
          SCOPED_TRACE("B = " + std::to_string(shape.batch) + ", " + std::to_string(threads) + " threads, " +
                       (reverse ? "reverse" : "forward") + (lengths ? ", lengths" : ""));
          const Inputs in = make(shape, lengths, 11);
          const States st = forward(in, reverse);
          const Grads want = plain(shape, in, st, reverse);
          const Grads got = by_step(shape, in, st, reverse, /*keep_gates=*/true);
          ASSERT_TRUE(got.done);
          expect_plain_bits_and_weights(got, want, in, st, reverse);
          expect_same_without_kept_gates(shape, in, st, reverse, got, want);
        }
      }
    }
}

// Negative control for the comparison above: the products against the wrong previous states
// (h_all at the same step) are far off.
TEST(LstmWeightGradsByStep, TheComparisonSeesAShiftedState) {
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512: the slot always declines";
  testing::ThreadCount thread_count(1);
  const Shape4 shape{5, 260, 9, 20};
  const Inputs in = make(shape, false, 11);
  const States st = forward(in, false);
  const Grads got = by_step(shape, in, st, false, true);
  ASSERT_TRUE(got.done);
  EXPECT_GT(relative_error(got.dw_hh, product_over_steps(got.dgates, st.h_all)), 1e-2);
}

// The partial sums are kept per thread between calls (Note [partial sums added by their threads]):
// a call after one of another shape, or beside one on another thread, must not see the other's.
TEST(LstmWeightGradsByStep, CallsAgainAndAtOnceGiveTheSameBits) {
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512: the slot always declines";
  // Big enough to run on a team (Note [batch-parallel recurrence]: 2^20 multiply-adds of steps), with
  // slices of 21 rows and more at 3 threads.
  const Shape4 big{6, 96, 9, 40}, other{6, 64, 13, 32};
  for (const Shape4& s : {big, other}) ASSERT_GE(s.steps * s.batch * 4 * s.hidden * s.hidden, int64_t{1} << 20);
  for (int threads : {2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    testing::ThreadCount thread_count(threads);
    const Inputs in_big = make(big, true, 21), in_other = make(other, false, 22);
    const States st_big = forward(in_big, false), st_other = forward(in_other, true);
    const Grads first = by_step(big, in_big, st_big, false, true);
    const Grads between = by_step(other, in_other, st_other, true, false);
    const Grads again = by_step(big, in_big, st_big, false, true);
    ASSERT_TRUE(first.done && between.done && again.done);
    EXPECT_TRUE(same_bits(again.dw_ih, first.dw_ih));
    EXPECT_TRUE(same_bits(again.dw_hh, first.dw_hh));
    // The negative control: the two shapes' gradients do differ, so equal bits above mean something.
    EXPECT_FALSE(same_bits(between.dw_hh.narrow(0, 0, 4).narrow(1, 0, 4), first.dw_hh.narrow(0, 0, 4).narrow(1, 0, 4)));
    Grads at_once_big, at_once_other;
    std::thread a([&] {
      testing::ThreadCount inner(threads);
      at_once_big = by_step(big, in_big, st_big, false, true);
    });
    std::thread b([&] {
      testing::ThreadCount inner(threads);
      at_once_other = by_step(other, in_other, st_other, true, false);
    });
    a.join();
    b.join();
    ASSERT_TRUE(at_once_big.done && at_once_other.done);
    EXPECT_TRUE(same_bits(at_once_big.dw_ih, first.dw_ih));
    EXPECT_TRUE(same_bits(at_once_big.dw_hh, first.dw_hh));
    EXPECT_TRUE(same_bits(at_once_other.dw_ih, between.dw_ih));
    EXPECT_TRUE(same_bits(at_once_other.dw_hh, between.dw_hh));
  }
}

// Batch 1: the recurrence's gradients are the plain backward's bits, the weight gradients the
// products over all steps (in chunks of 2/5, 2/5 and 1/5 of the steps, so in another order: within
// float rounding), and every thread count gives one thread's bits, whether the chunks are added
// beside the recurrence or after it (the measured choice: after its timings are forgotten, two calls
// beside, then two after). Shapes: 50 steps (three chunks), 7 (chunks of 2, 3 and 2), 3 (one chunk:
// fewer than five steps); forward and reverse, with and without lengths, the gate gradients kept or
// not. The calls meant to run beside must have run the chunks on the second thread (else the
// comparison would be of one thread with itself), and the one meant to run after must not have.
TEST(LstmWeightGradsByStep, BatchOneWeightsBesideOrAfterTheRecurrenceGiveOneThreadsBits) {
  if (!cpu::lstm_batch1_path_applies(1, kFloat32, false) || !cpu::sgemm_avx512_available())
    GTEST_SKIP() << "no AVX-512: the batch-1 path is off";
  for (const Shape4 shape : {Shape4{50, 1, 9, 20}, Shape4{7, 1, 9, 72}, Shape4{3, 1, 5, 16}})
    for (bool reverse : {false, true})
      for (bool lengths : {false, true}) {
        SCOPED_TRACE("T = " + std::to_string(shape.steps) + ", H = " + std::to_string(shape.hidden) +
                     (reverse ? ", reverse" : ", forward") + (lengths ? ", lengths" : ""));
        Inputs in = make(shape, false, 13);
        if (lengths) in.lengths = tensor<int64_t>({shape.steps - 2});
        Grads one;
        for (int threads : {1, 2, 3}) {
          SCOPED_TRACE(std::to_string(threads) + " threads");
          testing::ThreadCount thread_count(threads);
          const States st = forward(in, reverse);
          const Grads want = plain(shape, in, st, reverse);
          cpu::lstm_split_forget_timings();
          const int64_t beside_before = cpu::lstm_batch1_weight_calls_beside();
          const Grads got = by_step(shape, in, st, reverse, /*keep_gates=*/true);
          ASSERT_TRUE(got.done);
          expect_plain_bits_and_weights(got, want, in, st, reverse);
          expect_same_without_kept_gates(shape, in, st, reverse, got, want);
          if (threads == 1) {
            one = got;
            continue;
          }
          EXPECT_EQ(cpu::lstm_batch1_weight_calls_beside() - beside_before, 2) << "two calls beside";
          const Grads after = by_step(shape, in, st, reverse, /*keep_gates=*/true);
          EXPECT_EQ(cpu::lstm_batch1_weight_calls_beside() - beside_before, 2) << "then one after";
          for (const Grads* g : {&got, &after}) {
            EXPECT_TRUE(same_bits(g->dw_ih, one.dw_ih));
            EXPECT_TRUE(same_bits(g->dw_hh, one.dw_hh));
            EXPECT_TRUE(same_bits(g->db_ih, one.db_ih));
            EXPECT_TRUE(same_bits(g->dh, one.dh));
          }
        }
      }
}

TEST(LstmWeightGradsByStep, ShortSlicesDeclineAndWriteNothing) {
  testing::ThreadCount thread_count(1);
  for (const Shape4 shape : {Shape4{5, 7, 9, 20}, Shape4{3, 260, 64, 256}}) {
    SCOPED_TRACE("B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.hidden));
    const Inputs in = make(shape, false, 12);
    const States st = forward(in, false);
    const Grads got = by_step(shape, in, st, false, true);
    EXPECT_FALSE(got.done);
    EXPECT_FALSE(cpu::lstm_weight_grads_by_step(shape.steps, shape.batch, shape.hidden, shape.input, kFloat32));
    for (const Tensor& t : {got.dh, got.dc, got.dgates, got.db_ih, got.db_hh, got.dw_ih, got.dw_hh})
      EXPECT_EQ(testing::values(t), std::vector<double>(static_cast<size_t>(t.numel()), 7.0));
  }
}

}  // namespace
}  // namespace tapegrad
