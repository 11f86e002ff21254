// Kernel benchmarks on the CPU and, where present, CUDA: GEMM at the shapes the named models use,
// elementwise ops and reductions at several sizes, softmax-cross-entropy forward+backward, one
// LSTM cell step and whole LSTM layers forward and backward, and the optimiser updates. Counters
// give FLOP/s (compute-bound kernels) or bytes/s (memory-bound ones) so each can be set against
// the machine's peak. Run with --benchmark_format=json for machine-readable output.
#include <cmath>

#include "common/adam_floor.h"
#include "device_timing.h"
#include "models/named_configs.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

constexpr double kF32 = 4;  // bytes per element

// An [m, k] x [k, n] float product with each operand stored as the models store it.
enum class Layout {
  kLinearForward,  // x [m, k] times w [n, k] transposed (a Linear layer, an LSTM's projections)
  kPlain,          // x [m, k] times w [k, n] as stored (an LSTM's backward step: dgates W_hh)
  kWeightGrad,     // g [k, m] transposed times x [k, n] (a weight gradient: dgates^T h)
};
struct GemmShape {
  const char* label;
  int64_t m, k, n;
  Layout layout = Layout::kLinearForward;
};
const GemmShape kGemmShapes[] = {
    {"mlp_seed_fc1_b64", 64, 1000, 512},
    {"mlp_seed_fc1_b1024", 1024, 1000, 512},
    {"mlp_fashion_fc1_b256", 256, 784, 512},
    {"lstm_small_recurrent_b64", 64, 128, 512},
    {"lstm_small_input_b64", 3200, 32, 512},
    {"lstm_large_recurrent_b64", 64, 512, 2048},
    {"lstm_large_input_b64", 6400, 256, 2048},
    {"square_1024", 1024, 1024, 1024},
    {"square_2048", 2048, 2048, 2048},
    {"lstm_small_recurrent_grad_b64", 64, 512, 128, Layout::kPlain},
    {"lstm_large_recurrent_grad_b64", 64, 2048, 512, Layout::kPlain},
    {"lstm_row_w_hh_grad_b64", 512, 1728, 128, Layout::kWeightGrad},
    {"lstm_large_w_hh_grad_b64", 2048, 6336, 512, Layout::kWeightGrad},
};

void register_gemm(Device device) {
  for (const GemmShape& g : kGemmShapes) {
    register_on(std::string("gemm/") + g.label, device, [g](benchmark::State& state, Device dev) {
      Tensor y;
      if (g.layout == Layout::kLinearForward) {
        Tensor x = randn({g.m, g.k}).to(dev), w = randn({g.n, g.k}).to(dev);
        time_loop(state, dev, [&] { y = mm(x, w.t()); });
      } else if (g.layout == Layout::kPlain) {
        Tensor x = randn({g.m, g.k}).to(dev), w = randn({g.k, g.n}).to(dev);
        time_loop(state, dev, [&] { y = mm(x, w); });
      } else {
        Tensor grad = randn({g.k, g.m}).to(dev), x = randn({g.k, g.n}).to(dev);
        time_loop(state, dev, [&] { y = mm(grad.t(), x); });
      }
      set_flops(state, 2.0 * g.m * g.k * g.n);
    });
  }
}

const std::vector<int64_t> kSizes = {1 << 12, 1 << 16, 1 << 20, 1 << 24};

void register_elementwise(Device device) {
  struct Unary {
    const char* name;
    Tensor (*fn)(const Tensor&);
  };
  for (Unary u : {Unary{"relu", [](const Tensor& t) { return t.relu(); }},
                  Unary{"sigmoid", [](const Tensor& t) { return t.sigmoid(); }},
                  Unary{"tanh", [](const Tensor& t) { return t.tanh(); }}}) {
    auto* b = register_on(std::string("unary/") + u.name, device, [u](benchmark::State& state, Device dev) {
      Tensor a = randn({state.range(0)}).to(dev), y;
      time_loop(state, dev, [&] { y = u.fn(a); });
      set_bytes(state, 2 * kF32 * static_cast<double>(state.range(0)));
    });
    for (int64_t n : kSizes) b->Arg(n);
  }
  auto* add_b = register_on("binary/add", device, [](benchmark::State& state, Device dev) {
    Tensor a = randn({state.range(0)}).to(dev), c = randn({state.range(0)}).to(dev), y;
    time_loop(state, dev, [&] { y = a + c; });
    set_bytes(state, 3 * kF32 * static_cast<double>(state.range(0)));
  });
  auto* bias_b = register_on("binary/add_row_broadcast", device, [](benchmark::State& state, Device dev) {
    Tensor a = randn({state.range(0) / 1024, 1024}).to(dev), bias = randn({1024}).to(dev), y;
    time_loop(state, dev, [&] { y = a + bias; });
    set_bytes(state, 2 * kF32 * static_cast<double>(state.range(0)));
  });
  for (int64_t n : kSizes) add_b->Arg(n), bias_b->Arg(n);
}

void register_reductions(Device device) {
  struct Reduction {
    const char* name;
    Tensor (*fn)(const Tensor&);
  };
  for (Reduction r : {Reduction{"sum_all", [](const Tensor& t) { return sum(t); }},
                      Reduction{"sum_rows", [](const Tensor& t) { return sum(t, Shape{0}); }},
                      Reduction{"sum_cols", [](const Tensor& t) { return sum(t, Shape{1}); }}}) {
    auto* b = register_on(std::string("reduce/") + r.name, device, [r](benchmark::State& state, Device dev) {
      Tensor a = randn({state.range(0) / 1024, 1024}).to(dev), y;
      time_loop(state, dev, [&] { y = r.fn(a); });
      set_bytes(state, kF32 * static_cast<double>(state.range(0)));
    });
    for (int64_t n : kSizes) b->Arg(n);
  }
}

void register_cross_entropy(Device device) {
  auto* b = register_on("softmax_cross_entropy/fwd_bwd", device, [](benchmark::State& state, Device dev) {
    const int64_t batch = state.range(0), classes = state.range(1);
    Tensor logits = randn({batch, classes}).to(dev).requires_grad_();
    Tensor target = randint(0, classes, {batch}).to(dev);
    time_loop(state, dev, [&] {
      cross_entropy(logits, target).backward();
      logits.set_grad(Tensor());
    });
    set_bytes(state, 2 * kF32 * static_cast<double>(batch * classes));  // read logits, write their gradient
  });
  for (int64_t batch : {64, 1024, 4096})
    for (int64_t classes : {10, 1000}) b->Args({batch, classes});
}

// LSTM weights and inputs for one layer on `dev`.
struct LstmLayerData {
  Tensor x, h0, c0, w_ih, w_hh, b_ih, b_hh;
  LstmLayerData(int64_t steps, int64_t batch, int64_t input, int64_t hidden, Device dev, bool grad) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hidden));
    x = randn({steps, batch, input}).to(dev);
    h0 = zeros({batch, hidden}).to(dev), c0 = zeros({batch, hidden}).to(dev);
    w_ih = (randn({4 * hidden, input}) * scale).to(dev), w_hh = (randn({4 * hidden, hidden}) * scale).to(dev);
    b_ih = (randn({4 * hidden}) * scale).to(dev), b_hh = (randn({4 * hidden}) * scale).to(dev);
    if (grad)
      for (Tensor* t : {&x, &w_ih, &w_hh, &b_ih, &b_hh}) t->requires_grad_();
  }
  LstmLayerOutput forward() const { return lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh); }
  void clear_grads() const {
    for (const Tensor* t : {&x, &w_ih, &w_hh, &b_ih, &b_hh}) t->set_grad(Tensor());
  }
};

// A layer of `steps` timesteps forward (and backward, from the sum of its outputs).
void lstm_bench(benchmark::State& state, Device dev, int64_t steps, int64_t batch, int64_t input, int64_t hidden,
                bool backward) {
  LstmLayerData d(steps, batch, input, hidden, dev, backward);
  time_loop(state, dev, [&] {
    LstmLayerOutput out = d.forward();
    if (backward) {
      sum(out.output).backward();
      d.clear_grads();
    }
  });
  double forward_flops = 2.0 * steps * batch * 4 * hidden * (input + hidden);
  set_flops(state, forward_flops * (backward ? 3 : 1));
}

void register_lstm(Device device) {
  // One timestep: input GEMM, recurrent GEMM and the fused cell (the cell kernel alone is not
  // reachable through the public API).
  for (bool backward : {false, true}) {
    auto* b = register_on(std::string("lstm_cell_step/") + (backward ? "fwd_bwd" : "fwd"), device,
                          [backward](benchmark::State& state, Device dev) {
                            lstm_bench(state, dev, 1, state.range(0), state.range(1), state.range(2), backward);
                          });
    b->ArgNames({"batch", "input", "hidden"});
    for (int64_t batch : {1, 64, 256}) b->Args({batch, 32, 128})->Args({batch, 256, 512});
  }
  // The two layers of char_lstm's 2-layer LSTM(64, 256) at its batch 32 and BPTT 128: a small batch
  // slice per thread under weights too large for one core's L2 in the second layer.
  for (int64_t input : {64, 256})
    for (bool backward : {false, true})
      register_on(
          std::string("lstm_layer/char_lstm_l") + (input == 64 ? "1" : "2") + "_b32" + (backward ? "/fwd_bwd" : "/fwd"),
          device, [input, backward](benchmark::State& state, Device dev) {
            lstm_bench(state, dev, 128, 32, input, 256, backward);
          });
  // Whole layers of the named LSTM configurations at their headline batch.
  for (const char* name : {"lstm_row", "lstm_small", "lstm_large"}) {
    const NamedConfig& c = named_config(name);
    const int64_t batch = c.batch_sizes.size() > 2 ? c.batch_sizes[2] : c.batch_sizes[0];  // lstm_small: 64
    for (bool backward : {false, true}) {
      register_on(std::string("lstm_layer/") + name + "_b" + std::to_string(batch) + (backward ? "/fwd_bwd" : "/fwd"),
                  device, [c, batch, backward](benchmark::State& state, Device dev) {
                    lstm_bench(state, dev, c.shape.seq_len, batch, c.shape.input_size, c.shape.hidden_size, backward);
                  });
    }
  }
}

// One optimiser step over the parameters of a named model, with random gradients.
void register_optimisers(Device device) {
  for (const char* name : {"mlp_seed", "lstm_large"}) {
    for (bool adam : {true, false}) {
      register_on(std::string("optim/") + (adam ? "adam/" : "sgd_momentum/") + name, device,
                  [name, adam](benchmark::State& state, Device dev) {
                    auto model = build_model(named_config(name).shape);
                    model->to(dev);
                    std::vector<Tensor> params = model->parameters();
                    double elements = 0;
                    for (const Tensor& p : params) {
                      p.set_grad(randn(p.sizes()).to(dev));
                      elements += static_cast<double>(p.numel());
                    }
                    std::unique_ptr<optim::Optimizer> opt;
                    if (adam)
                      opt = std::make_unique<optim::Adam>(params);
                    else
                      opt = std::make_unique<optim::SGD>(params, optim::SGDOptions(0.01).momentum(0.9));
                    time_loop(state, dev, [&] { opt->step(); });
                    // Adam reads param, grad, m, v and writes param, m, v; SGD reads param, grad,
                    // buffer and writes param, buffer.
                    set_bytes(state, (adam ? 7 : 5) * kF32 * elements);
                    state.counters["params"] = elements;
                  });
    }
  }
}

// Adam's memory floor on the CPU (common/adam_floor.h) over a named model's parameters: its step can
// take no less while its state does not fit in the cores' caches; optim/adam/<name> beside it says
// how close it comes.
void register_optimiser_floor() {
  for (const char* name : {"mlp_seed", "lstm_large"}) {
    register_on(std::string("optim/adam_streams_floor/") + name, kCPU, [name](benchmark::State& state, Device) {
      auto model = build_model(named_config(name).shape);
      int64_t elements = 0;
      for (const Tensor& p : model->parameters()) elements += p.numel();
      AdamStreams streams(elements);
      const int threads = get_num_threads();
      time_loop(state, kCPU, [&] { streams.pass(threads); });
      set_bytes(state, 7 * kF32 * static_cast<double>(elements));
      state.counters["params"] = static_cast<double>(elements);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (Device device : benchmark_devices()) {
    register_gemm(device);
    register_elementwise(device);
    register_reductions(device);
    register_cross_entropy(device);
    register_lstm(device);
    register_optimisers(device);
  }
  register_optimiser_floor();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tapegrad_threads", std::to_string(get_num_threads()));
  benchmark::AddCustomContext("cuda", cuda::is_available() ? "available" : "no GPU found");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
