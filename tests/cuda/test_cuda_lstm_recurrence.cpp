// The CUDA lstm_recurrence_forward/backward slots (cuda/kernels/lstm_recurrence.cu) against the CPU's on
// the same inputs: gates, states and every gradient, both directions, padded lengths, bf16
// products, f64, hidden sizes up to and beyond the persistent kernel's limit, small batches (the
// persistent kernel) and large ones (one GEMM per step). Which path ran is checked through the
// profiler's GEMM count, so a fallback cannot pass for the persistent kernel. Then nn::LSTM
// trained on CUDA against the CPU. Skips where no GPU is present.
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

struct Case {
  int64_t steps, batch, input, hidden;
  bool reverse, lengths;
  DType dtype = kFloat32, products = kFloat32;
  bool persistent = true;  // which CUDA path is expected
};

std::string describe(const Case& c) {
  return "T=" + std::to_string(c.steps) + " B=" + std::to_string(c.batch) + " I=" + std::to_string(c.input) +
         " H=" + std::to_string(c.hidden) + (c.reverse ? " reverse" : "") + (c.lengths ? " lengths" : "") + " " +
         std::string(dtype_name(c.dtype)) + (c.products != c.dtype ? " bf16 products" : "") +
         (c.persistent ? " (persistent)" : " (per step)");
}

testing::Tol tolerance(const Case& c) {
  if (c.dtype == kFloat64) return {1e-10, 1e-12};
  if (c.products == kBFloat16) return {1e-2, 2e-3};
  return {1e-4, 1e-5};
}

// The GEMMs a function issues through the CUDA kernel table (the profiler wraps every slot).
template <class F>
int64_t cuda_gemms(F&& f) {
  profiler::Profiler prof;
  prof.start();
  f();
  prof.stop();
  int64_t n = 0;
  for (const profiler::ProfilerEvent& e : prof.events())
    if (e.kind == profiler::EventKind::Kernel && e.device.is_cuda() && e.name.find("gemm") != std::string::npos) ++n;
  return n;
}

struct Inputs {
  Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0, lengths, grad_h, grad_h_n, grad_c_n;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Generator g(seed);
  const int64_t T = c.steps, B = c.batch, I = c.input, H = c.hidden;
  auto r = [&](Shape s, double scale) { return mul(randn(s, c.dtype, &g), scale); };
  Inputs in;
  in.x = r({T, B, I}, 1.0);
  in.w_ih = r({4 * H, I}, 0.3);
  in.w_hh = r({4 * H, H}, 1.0 / std::sqrt(static_cast<double>(H)));
  in.b_ih = r({4 * H}, 0.5);
  in.b_hh = r({4 * H}, 0.5);
  in.h0 = r({B, H}, 0.5);
  in.c0 = r({B, H}, 0.5);
  if (c.lengths) {
    std::vector<int64_t> lens(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) lens[static_cast<size_t>(b)] = b == 0 ? T : (b == 1 ? 0 : (b * 7 + 1) % (T + 1));
    in.lengths = tensor<int64_t>(lens);
  }
  in.grad_h = r({T, B, H}, 1.0);
  in.grad_h_n = r({B, H}, 1.0);
  in.grad_c_n = r({B, H}, 1.0);
  return in;
}

// The slot's outputs of one backend.
struct Result {
  Tensor gates, h_all, c_all, dgates, dh, dc, grad_b_ih, grad_b_hh;
};

// Forward on `device`; backward from the CPU's forward (so a forward difference does not hide in
// the backward's comparison), with grad_h_all given as `grad_h` (any layout or undefined) and the
// last state's gradients as in.grad_h_n and in.grad_c_n (the same).
Result run_slots(const Case& c, const Inputs& in, const Result* cpu_forward, const Tensor& grad_h, Device device,
                 int64_t* gemms = nullptr) {
  const backend::KernelTable& k = backend::kernels(device);
  auto on = [&](const Tensor& t) { return t.defined() ? t.to(device) : Tensor(); };
  const int64_t T = c.steps, B = c.batch, H = c.hidden;
  Result r;
  r.gates = empty({T, B, 4 * H}, TensorOptions(c.dtype).device(device));
  r.h_all = empty({T, B, H}, TensorOptions(c.dtype).device(device));
  r.c_all = empty({T, B, H}, TensorOptions(c.dtype).device(device));
  const Tensor lengths = on(in.lengths);
  auto forward = [&] {
    k.lstm_recurrence_forward(on(in.x), on(in.w_ih), on(in.w_hh), on(in.b_ih), on(in.b_hh), on(in.h0), on(in.c0),
                              r.gates, r.h_all, r.c_all, lengths, c.reverse, c.products);
  };
  Tensor gates = cpu_forward != nullptr ? on(cpu_forward->gates) : Tensor();
  Tensor c_all = cpu_forward != nullptr ? on(cpu_forward->c_all) : Tensor();
  // Outputs start as NaN, so a value the slot fails to write shows.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.dh = full({B, H}, nan, TensorOptions(c.dtype).device(device));
  r.dc = full({B, H}, nan, TensorOptions(c.dtype).device(device));
  r.dgates = empty({T, B, 4 * H}, TensorOptions(c.dtype).device(device));
  if (in.b_ih.defined()) r.grad_b_ih = full({4 * H}, nan, TensorOptions(c.dtype).device(device));
  if (in.b_hh.defined()) r.grad_b_hh = full({4 * H}, nan, TensorOptions(c.dtype).device(device));
  auto backward = [&] {
    k.lstm_recurrence_backward(gates.defined() ? gates : r.gates, on(in.w_hh), on(in.c0),
                               c_all.defined() ? c_all : r.c_all, on(grad_h), on(in.grad_h_n), on(in.grad_c_n), r.dh,
                               r.dc, r.dgates, r.grad_b_ih, r.grad_b_hh, lengths, c.reverse, c.products);
  };
  if (gemms != nullptr) {
    *gemms = cuda_gemms([&] {
      forward();
      backward();
    });
  } else {
    forward();
    backward();
  }
  return r;
}

void check_case(const Case& c) {
  ASSERT_NE(backend::kernels(kCUDA).lstm_recurrence_forward, nullptr);
  ASSERT_NE(backend::kernels(kCUDA).lstm_recurrence_backward, nullptr);
  const Inputs in = make_inputs(c, 7);
  const std::string what = describe(c);
  Result want = run_slots(c, in, nullptr, in.grad_h, kCPU);
  int64_t gemms = 0;
  Result got = run_slots(c, in, &want, in.grad_h, kCUDA, &gemms);
  // Persistent: the input projection only (forward); per step: that one, then one per step each way.
  EXPECT_EQ(gemms, c.persistent ? 1 : 1 + 2 * c.steps) << what << ": not the expected path";
  const testing::Tol tol = tolerance(c);
  testing::expect_parity(got.gates, want.gates, tol, what + " gates");
  testing::expect_parity(got.h_all, want.h_all, tol, what + " h_all");
  testing::expect_parity(got.c_all, want.c_all, tol, what + " c_all");
  testing::expect_parity(got.dgates, want.dgates, tol, what + " dgates");
  testing::expect_parity(got.dh, want.dh, tol, what + " dh");
  testing::expect_parity(got.dc, want.dc, tol, what + " dc");
  testing::expect_parity(got.grad_b_ih, want.grad_b_ih, tol, what + " grad_b_ih");
  testing::expect_parity(got.grad_b_hh, want.grad_b_hh, tol, what + " grad_b_hh");
}

class CudaLstmRecurrence : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLstmRecurrence, MatchesTheCpuSlots) {
  SKIP_WITHOUT_GPU();
  check_case(GetParam());
}

// Emulated sizes stay small (each CUDA thread is a fiber); a GPU gets the lstm_small shape.
std::vector<Case> cases() {
  const int64_t T = gpu_size(50, 5), H = gpu_size(128, 16);
  return {
      {T, 1, gpu_size(32, 4), H, false, false},
      {T, 3, 4, H, true, false},
      {T, 5, 4, 20, false, true},  // 20 units: a last block with fewer units
      {T, 5, 4, 20, true, true},
      {T, 4, 3, 12, false, true, kFloat64, kFloat64},
      {T, 4, 3, 12, true, false, kFloat32, kBFloat16},
      {T, 32, 3, 8, false, true},                             // the largest persistent batch
      {T, 33, 3, 8, false, true, kFloat32, kFloat32, false},  // one row more: per step
      {T, 40, 3, 8, true, true, kFloat32, kBFloat16, false},
      {T, 40, 3, 8, true, false, kFloat64, kFloat64, false},
      {2, 2, 3, 512, false, true},                              // H = 512 on the persistent kernel
      {2, 1, 3, 1536, true, false, kFloat32, kFloat32, false},  // beyond its shared memory: per step
  };
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaLstmRecurrence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "case" + std::to_string(info.index);
                         });

// 16-bit tensors take the per-step path (the persistent kernel runs float and double): against
// the CPU layer in float32 on the same (bf16-representable) values.
TEST(CudaLstmRecurrenceHalf, Bf16TensorsMatchTheCpuLayer) {
  SKIP_WITHOUT_GPU();
  Generator g(3);
  const int64_t T = 4, B = 3, I = 5, H = 8;
  auto r = [&](Shape s, double scale) { return mul(randn(s, kFloat32, &g), scale).to(kBFloat16).to(kFloat32); };
  Tensor x = r({T, B, I}, 1.0), h0 = r({B, H}, 0.5), c0 = r({B, H}, 0.5);
  Tensor w_ih = r({4 * H, I}, 0.3), w_hh = r({4 * H, H}, 0.3), b_ih = r({4 * H}, 0.5), b_hh = r({4 * H}, 0.5);
  LstmLayerOutput want = lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, Tensor(), false);
  auto on = [&](const Tensor& t) { return t.to(kBFloat16).to(kCUDA); };
  LstmLayerOutput got = lstm_layer(on(x), on(h0), on(c0), on(w_ih), on(w_hh), on(b_ih), on(b_hh), Tensor(), false);
  testing::expect_allclose(got.output.cpu().to(kFloat32), want.output, {3e-2, 3e-2}, "bf16 output");
  testing::expect_allclose(got.c_n.cpu().to(kFloat32), want.c_n, {3e-2, 3e-2}, "bf16 c_n");
}

// The incoming gradients are read through their strides: transposed views, a broadcast zero, and
// undefined (zeros: an output nothing used); one bias or none.
TEST(CudaLstmRecurrenceGradLayout, StridedBroadcastAndUndefinedGradients) {
  SKIP_WITHOUT_GPU();
  for (bool batch : {true, false}) {  // per step, persistent
    const Case c{4, batch ? 40 : 3, 3, 8, false, true};
    const Inputs base = make_inputs(c, 11);
    auto transposed = [](const Tensor& t) { return t.transpose(0, 1).contiguous().transpose(0, 1); };
    struct Layout {
      std::string name;
      Tensor grad_h, grad_h_n, grad_c_n, b_ih, b_hh;
    };
    const Tensor zero_h = zeros({1, 1, 1}, TensorOptions(c.dtype)).expand({c.steps, c.batch, c.hidden});
    const std::vector<Layout> layouts = {
        {"transposed", transposed(base.grad_h), transposed(base.grad_h_n), transposed(base.grad_c_n), base.b_ih,
         base.b_hh},
        {"broadcast zero", zero_h, base.grad_h_n, base.grad_c_n, base.b_ih, base.b_hh},
        {"undefined output gradient", Tensor(), base.grad_h_n, base.grad_c_n, base.b_ih, Tensor()},
        {"undefined state gradients", base.grad_h, Tensor(), Tensor(), Tensor(), base.b_hh},
        {"all undefined, no bias", Tensor(), Tensor(), Tensor(), Tensor(), Tensor()},
    };
    for (const Layout& l : layouts) {
      Inputs in = base;
      in.grad_h_n = l.grad_h_n;
      in.grad_c_n = l.grad_c_n;
      in.b_ih = l.b_ih;
      in.b_hh = l.b_hh;
      Result want = run_slots(c, in, nullptr, l.grad_h, kCPU);
      Result got = run_slots(c, in, &want, l.grad_h, kCUDA);
      const std::string what = describe(c) + " " + l.name;
      testing::expect_parity(got.h_all, want.h_all, tolerance(c), what + " h_all");
      testing::expect_parity(got.dgates, want.dgates, tolerance(c), what + " dgates");
      testing::expect_parity(got.dh, want.dh, tolerance(c), what + " dh");
      testing::expect_parity(got.dc, want.dc, tolerance(c), what + " dc");
      EXPECT_EQ(got.grad_b_ih.defined(), l.b_ih.defined());
      EXPECT_EQ(got.grad_b_hh.defined(), l.b_hh.defined());
      if (got.grad_b_ih.defined()) testing::expect_parity(got.grad_b_ih, want.grad_b_ih, tolerance(c), what + " b_ih");
      if (got.grad_b_hh.defined()) testing::expect_parity(got.grad_b_hh, want.grad_b_hh, tolerance(c), what + " b_hh");
    }
    // An undefined gradient is a zero: the same dgates as the broadcast zero gave.
    Inputs none = base;
    none.grad_h_n = zeros({c.batch, c.hidden}, TensorOptions(c.dtype));
    none.grad_c_n = Tensor();
    Result zeros_given = run_slots(c, none, nullptr, zero_h, kCPU);
    none.grad_h_n = Tensor();
    Result undefined = run_slots(c, none, nullptr, Tensor(), kCUDA);
    testing::expect_parity(undefined.dgates, zeros_given.dgates, tolerance(c), describe(c) + " undefined = zeros");
  }
}

// Negative control for the parity check: a wrong direction on one side must be seen.
TEST(CudaLstmRecurrenceControl, AWrongDirectionIsCaught) {
  SKIP_WITHOUT_GPU();
  Case c{5, 2, 3, 8, false, false};
  const Inputs in = make_inputs(c, 5);
  Result want = run_slots(c, in, nullptr, in.grad_h, kCPU);
  c.reverse = true;
  Result got = run_slots(c, in, &want, in.grad_h, kCUDA);
  EXPECT_FALSE(allclose(got.h_all.cpu(), want.h_all, 1e-4, 1e-5));
}

// nn::LSTM (two layers, bidirectional, padded lengths) trained with SGD on CUDA against the CPU.
TEST(CudaLstmRecurrenceTraining, SgdStepsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t T = gpu_size(20, 4), B = 3, I = 5, H = gpu_size(64, 8);
  auto options = nn::LSTMOptions().num_layers(2).bidirectional(true);
  Generator init(5);
  nn::LSTM cpu(I, H, options, &init);
  nn::LSTM gpu(I, H, options);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(kCUDA);
  Generator g(6);
  Tensor x = randn({T, B, I}, kFloat32, &g), target = randn({T, B, 2 * H}, kFloat32, &g);
  Tensor lengths = tensor<int64_t>({T, T - 1, 1});
  auto train = [&](nn::LSTM& lstm, Device d) {
    optim::SGD opt(lstm.parameters(), optim::SGDOptions(0.1));
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      nn::LSTMOutput out = lstm.forward(x.to(d), Tensor(), Tensor(), lengths);
      Tensor loss = add(mean(mul(sub(out.output, target.to(d)), sub(out.output, target.to(d)))), sum(out.h_n));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
    return losses;
  };
  std::vector<double> want = train(cpu, kCPU), got = train(gpu, kCUDA);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "step " << i;
  StateDict sc = cpu.state_dict(), sg = gpu.state_dict();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i)
    testing::expect_allclose(sg[i].second.cpu(), sc[i].second, {1e-3, 1e-5}, sc[i].first);
}

}  // namespace
}  // namespace tapegrad
