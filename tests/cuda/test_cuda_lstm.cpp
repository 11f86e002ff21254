// The fused LSTM on the GPU against the CPU with the same weights and inputs: nn::LSTM (layers,
// bidirectional, variable lengths, batch_first) forward and every gradient, 1e-4 relative in f32;
// the layer op (one cell kernel per step) in f64, in 16-bit types, and at edge sizes. Skips where
// no GPU is present.
#include <cmath>
#include <string>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {
void expect_near(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  testing::expect_allclose(got, want, {rtol, atol}, what);
}

struct ModuleCase {
  int64_t layers;
  bool bidirectional, batch_first, with_lengths, with_state;
};

std::string describe(const ModuleCase& c) {
  return "layers=" + std::to_string(c.layers) + (c.bidirectional ? " bidirectional" : "") +
         (c.batch_first ? " batch_first" : "") + (c.with_lengths ? " lengths" : "") + (c.with_state ? " h0/c0" : "");
}

void PrintTo(const ModuleCase& c, std::ostream* os) {
  *os << describe(c);
}

class CudaLstmModule : public ::testing::TestWithParam<ModuleCase> {};

TEST_P(CudaLstmModule, ForwardAndAllGradientsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const ModuleCase c = GetParam();
  const int64_t T = 7, B = 5, I = 6, H = 9, D = c.bidirectional ? 2 : 1;
  auto options = nn::LSTMOptions().num_layers(c.layers).bidirectional(c.bidirectional).batch_first(c.batch_first);
  Generator init(41);
  nn::LSTM cpu_lstm(I, H, options, &init);
  nn::LSTM gpu_lstm(I, H, options);
  gpu_lstm.load_state_dict(cpu_lstm.state_dict());
  gpu_lstm.to(kCUDA);

  Generator g(42);
  Tensor x = randn(c.batch_first ? Shape{B, T, I} : Shape{T, B, I}, kFloat32, &g);
  Tensor h0 = c.with_state ? mul(randn({c.layers * D, B, H}, kFloat32, &g), 0.5) : Tensor();
  Tensor c0 = c.with_state ? mul(randn({c.layers * D, B, H}, kFloat32, &g), 0.5) : Tensor();
  // Includes a full-length row, an empty one and one of length 1.
  Tensor lengths = c.with_lengths ? tensor<int64_t>({T, 3, 0, 1, T - 2}) : Tensor();
  Tensor w_out = randn(c.batch_first ? Shape{B, T, D * H} : Shape{T, B, D * H}, kFloat32, &g);
  Tensor w_h = randn({c.layers * D, B, H}, kFloat32, &g), w_c = randn({c.layers * D, B, H}, kFloat32, &g);

  struct Run {
    nn::LSTMOutput out;
    Tensor dx, dh0, dc0;
  };
  auto run = [&](nn::LSTM& lstm, Device device) {
    Tensor xd = x.detach().to(device).requires_grad_();
    Tensor h0d = c.with_state ? h0.detach().to(device).requires_grad_() : Tensor();
    Tensor c0d = c.with_state ? c0.detach().to(device).requires_grad_() : Tensor();
    Run r;
    r.out = lstm.forward(xd, h0d, c0d, lengths);
    Tensor loss = add(add(sum(mul(r.out.output, w_out.to(device))), sum(mul(r.out.h_n, w_h.to(device)))),
                      sum(mul(r.out.c_n, w_c.to(device))));
    loss.backward();
    r.dx = xd.grad();
    if (c.with_state) {
      r.dh0 = h0d.grad();
      r.dc0 = c0d.grad();
    }
    return r;
  };
  Run want = run(cpu_lstm, kCPU);
  Run got = run(gpu_lstm, kCUDA);
  const std::string what = describe(c);
  const double atol = 1e-5, rtol = 1e-4;
  expect_near(got.out.output, want.out.output, atol, rtol, what + " output");
  expect_near(got.out.h_n, want.out.h_n, atol, rtol, what + " h_n");
  expect_near(got.out.c_n, want.out.c_n, atol, rtol, what + " c_n");
  expect_near(got.dx, want.dx, atol, rtol, what + " grad input");
  if (c.with_state) {
    expect_near(got.dh0, want.dh0, atol, rtol, what + " grad h0");
    expect_near(got.dc0, want.dc0, atol, rtol, what + " grad c0");
  }
  auto cpu_params = cpu_lstm.named_parameters(), gpu_params = gpu_lstm.named_parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_TRUE(gpu_params[i].second.device().is_cuda());
    expect_near(gpu_params[i].second.grad(), cpu_params[i].second.grad(), atol, rtol,
                what + " grad " + cpu_params[i].first);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configurations, CudaLstmModule,
    ::testing::Values(ModuleCase{1, false, false, false, false}, ModuleCase{2, false, false, true, true},
                      ModuleCase{2, true, false, false, true}, ModuleCase{2, true, true, true, false},
                      ModuleCase{3, true, false, true, true}, ModuleCase{1, false, true, true, true}));

struct LayerInputs {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh;
};

LayerInputs layer_inputs(int64_t T, int64_t B, int64_t I, int64_t H, uint64_t seed) {
  Generator g(seed);
  auto r = [&](Shape s, double scale) { return mul(randn(s, kFloat64, &g), scale); };
  return {r({T, B, I}, 1.0),  r({B, H}, 0.5),  r({B, H}, 0.5), r({4 * H, I}, 0.3),
          r({4 * H, H}, 0.3), r({4 * H}, 0.2), r({4 * H}, 0.2)};
}

// lstm_layer (the cell kernels between GEMMs) on both devices: output, h_n, c_n and all gradients.
void expect_layer_parity(const LayerInputs& in, DType gpu_dtype, DType cpu_dtype, const Tensor& lengths, bool reverse,
                         double atol, double rtol, const std::string& what) {
  auto run = [&](Device device, DType dtype, std::vector<Tensor>* grads) {
    std::vector<Tensor> leaves;
    for (const Tensor* t : {&in.x, &in.h0, &in.c0, &in.w_ih, &in.w_hh, &in.b_ih, &in.b_hh})
      leaves.push_back(t->detach().to(device, dtype).requires_grad_());
    LstmLayerOutput out =
        lstm_layer(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], leaves[5], leaves[6], lengths, reverse);
    if (grads != nullptr) {
      Tensor loss = add(add(sum(mul(out.output, out.output)), sum(out.h_n)), sum(mul(out.c_n, 0.5)));
      loss.backward();
      for (const Tensor& l : leaves) grads->push_back(l.grad());
    }
    return out;
  };
  const bool backward = gpu_dtype == kFloat32 || gpu_dtype == kFloat64;
  std::vector<Tensor> want_grads, got_grads;
  LstmLayerOutput want = run(kCPU, cpu_dtype, backward ? &want_grads : nullptr);
  LstmLayerOutput got = run(kCUDA, gpu_dtype, backward ? &got_grads : nullptr);
  EXPECT_EQ(got.output.dtype(), gpu_dtype);
  expect_near(got.output, want.output, atol, rtol, what + " output");
  expect_near(got.h_n, want.h_n, atol, rtol, what + " h_n");
  expect_near(got.c_n, want.c_n, atol, rtol, what + " c_n");
  const char* names[] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
  for (size_t i = 0; i < got_grads.size(); ++i)
    expect_near(got_grads[i], want_grads[i], atol, rtol, what + " grad " + names[i]);
}

TEST(CudaLstmLayer, Float64MatchesCpuClosely) {
  SKIP_WITHOUT_GPU();
  LayerInputs in = layer_inputs(6, 4, 5, 7, 51);
  Tensor lengths = tensor<int64_t>({6, 2, 0, 5});
  for (bool reverse : {false, true}) {
    std::string what = reverse ? "f64 reverse" : "f64";
    expect_layer_parity(in, kFloat64, kFloat64, Tensor(), reverse, 1e-12, 1e-10, what);
    expect_layer_parity(in, kFloat64, kFloat64, lengths, reverse, 1e-12, 1e-10, what + " lengths");
  }
}

// Odd sizes that span several blocks of the cell kernels, and a single step (the LSTMCell case).
TEST(CudaLstmLayer, ManyBlocksAndOneStep) {
  SKIP_WITHOUT_GPU();
  LayerInputs big = layer_inputs(3, 67, 11, 301, 52);
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < 67; ++b) lens.push_back(b % 4);
  expect_layer_parity(big, kFloat32, kFloat32, tensor<int64_t>(lens), false, 1e-5, 1e-4, "B=67 H=301");
  LayerInputs one = layer_inputs(1, 3, 4, 5, 53);
  expect_layer_parity(one, kFloat32, kFloat32, Tensor(), false, 1e-5, 1e-4, "one step");

  Generator init(54);
  nn::LSTMCell cpu_cell(4, 5, true, &init), gpu_cell(4, 5, true);
  gpu_cell.load_state_dict(cpu_cell.state_dict());
  gpu_cell.to(kCUDA);
  Tensor x = randn({3, 4}), h = randn({3, 5}), c = randn({3, 5});
  auto [h_cpu, c_cpu] = cpu_cell.forward(x, h, c);
  auto [h_gpu, c_gpu] = gpu_cell.forward(x.to(kCUDA), h.to(kCUDA), c.to(kCUDA));
  expect_near(h_gpu, h_cpu, 1e-6, 1e-5, "LSTMCell h");
  expect_near(c_gpu, c_cpu, 1e-6, 1e-5, "LSTMCell c");
}

// The cell kernels compute 16-bit tensors in f32; compared with the CPU's f32 run on the same
// rounded inputs (forward only: the CPU has no 16-bit LSTM to compare gradients with).
TEST(CudaLstmLayer, SixteenBitForward) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {kFloat16, kBFloat16}) {
    LayerInputs in = layer_inputs(4, 3, 8, 16, 55);
    for (Tensor* t : {&in.x, &in.h0, &in.c0, &in.w_ih, &in.w_hh, &in.b_ih, &in.b_hh}) *t = t->to(dtype);
    const double tol = dtype == kFloat16 ? 1e-2 : 5e-2;
    expect_layer_parity(in, dtype, kFloat32, Tensor(), false, tol, tol, dtype_name(dtype));
  }
}

TEST(CudaLstmLayer, EmptyBatchAndNoSteps) {
  SKIP_WITHOUT_GPU();
  LayerInputs empty_batch = layer_inputs(3, 0, 2, 4, 56);
  expect_layer_parity(empty_batch, kFloat32, kFloat32, Tensor(), false, 0, 0, "batch 0");
  LayerInputs no_steps = layer_inputs(0, 2, 2, 4, 57);
  expect_layer_parity(no_steps, kFloat32, kFloat32, Tensor(), true, 0, 0, "T = 0");
}

}  // namespace
}  // namespace tapegrad
