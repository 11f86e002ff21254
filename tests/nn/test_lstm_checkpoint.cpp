// nn::LSTM's checkpoint_layers and checkpoint_segments options: gradients against the plain module
// (f64; bit-identical per layer, to rounding per run of steps, where the weight gradients are
// summed over the runs), with dropout between layers (the default generator and one given to the
// module), lengths, both directions and batch_first; the controls that make those comparisons
// meaningful; autocast replayed in the recomputation; bad options; and the memory they save,
// counted by the CPU allocator (live bytes after the forward pass and the peak over the step).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/runtime/caching_allocator.h"
#include "support/test_util.h"
#include "tapegrad/amp/autocast.h"

namespace tapegrad {
namespace {

using testing::expect_error;
using testing::values;

struct Case {
  int64_t layers = 3;
  bool bidirectional = false, batch_first = false, with_lengths = false, own_generator = false;
  double dropout = 0.3;
  uint64_t dropout_seed = 23;
};

std::string describe(const Case& s) {
  return "layers " + std::to_string(s.layers) + (s.bidirectional ? ", bidirectional" : "") +
         (s.batch_first ? ", batch_first" : "") + (s.with_lengths ? ", lengths" : "") +
         (s.own_generator ? ", own generator" : "") + ", dropout " + std::to_string(s.dropout);
}

struct Grads {
  std::vector<std::vector<double>> grads;  // every parameter, then x, h0, c0
  std::vector<double> output, h_n, c_n;
  uint64_t generator_offset = 0;
};

constexpr int64_t kSteps = 9, kBatch = 4, kInput = 3, kHidden = 5;

// Builds the module with the same weights for every option set (seed 1), runs one forward and
// backward with seed 23 for the dropout (in the default generator, or in the module's own), and
// collects the gradients.
Grads run(const Case& s, const nn::LSTMOptions& checkpointing) {
  nn::LSTMOptions options = checkpointing;
  options.num_layers(s.layers).dropout(s.dropout).bidirectional(s.bidirectional).batch_first(s.batch_first);
  Generator own(1);
  manual_seed(1);
  nn::LSTM lstm(kInput, kHidden, options, s.own_generator ? &own : nullptr);
  lstm.to(kFloat64);
  lstm.train();
  const int64_t d = s.bidirectional ? 2 : 1;
  Tensor x = testing::leaf(s.batch_first ? Shape{kBatch, kSteps, kInput} : Shape{kSteps, kBatch, kInput}, 2);
  Tensor h0 = testing::leaf({s.layers * d, kBatch, kHidden}, 3);
  Tensor c0 = testing::leaf({s.layers * d, kBatch, kHidden}, 4);
  Tensor lengths = s.with_lengths ? tensor<int64_t>({9, 4, 0, 7}) : Tensor();
  manual_seed(s.dropout_seed);
  own.manual_seed(s.dropout_seed);
  nn::LSTMOutput out = lstm.forward(x, h0, c0, lengths);
  // Weights every output element differently, so that no gradient is a plain sum.
  Tensor loss = add(sum(mul(out.output, tanh(out.output))), add(sum(square(out.h_n)), mul(sum(out.c_n), 0.5)));
  loss.backward();
  Grads g;
  std::vector<Tensor> tensors = lstm.parameters();
  for (const Tensor& t : {x, h0, c0}) tensors.push_back(t);
  for (const Tensor& t : tensors) g.grads.push_back(t.grad().defined() ? values(t.grad()) : std::vector<double>{});
  g.output = values(out.output);
  g.h_n = values(out.h_n);
  g.c_n = values(out.c_n);
  g.generator_offset = (s.own_generator ? own : default_generator()).offset();
  return g;
}

// The largest |a - b| / (1 + |b|) over every gradient.
double max_relative_difference(const Grads& a, const Grads& b) {
  double worst = 0;
  EXPECT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size() && i < b.grads.size(); ++i) {
    EXPECT_EQ(a.grads[i].size(), b.grads[i].size()) << "tensor " << i;
    EXPECT_FALSE(a.grads[i].empty()) << "tensor " << i << " has no gradient";
    for (size_t j = 0; j < a.grads[i].size() && j < b.grads[i].size(); ++j)
      worst = std::max(worst, std::fabs(a.grads[i][j] - b.grads[i][j]) / (1 + std::fabs(b.grads[i][j])));
  }
  return worst;
}

const std::vector<Case>& setups() {
  static const std::vector<Case> all = [] {
    std::vector<Case> v;
    v.push_back(Case{});
    Case s;
    s.with_lengths = true;
    v.push_back(s);
    s.bidirectional = true;
    v.push_back(s);
    s.batch_first = true;
    s.own_generator = true;
    v.push_back(s);
    Case one;
    one.layers = 1;
    one.with_lengths = true;
    v.push_back(one);
    return v;
  }();
  return all;
}

TEST(LstmCheckpoint, PerLayerGradientsAreBitIdentical) {
  for (const Case& s : setups()) {
    SCOPED_TRACE(describe(s));
    const Grads plain = run(s, nn::LSTMOptions());
    const Grads layers = run(s, nn::LSTMOptions().checkpoint_layers(true));
    ASSERT_EQ(layers.grads.size(), plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      EXPECT_FALSE(plain.grads[i].empty());
      EXPECT_EQ(layers.grads[i], plain.grads[i]) << "gradient of tensor " << i;
    }
    EXPECT_EQ(layers.output, plain.output);
    EXPECT_EQ(layers.h_n, plain.h_n);
    EXPECT_EQ(layers.c_n, plain.c_n);
    EXPECT_EQ(layers.generator_offset, plain.generator_offset);
    if (s.layers > 1) EXPECT_GT(plain.generator_offset, 0u);  // the dropout drew from the generator named
  }
}

// Runs of steps: the forward is the plain one up to rounding and the gradients agree to rounding
// (the weight gradients are a sum over runs of products instead of one product).
TEST(LstmCheckpoint, PerSegmentGradientsAgreeToRounding) {
  for (const Case& s : setups()) {
    const Grads plain = run(s, nn::LSTMOptions());
    for (int64_t segments : {2, 3, 4, 9, 20}) {
      SCOPED_TRACE(describe(s) + ", segments " + std::to_string(segments));
      for (bool layers : {false, true}) {
        const Grads r = run(s, nn::LSTMOptions().checkpoint_segments(segments).checkpoint_layers(layers));
        EXPECT_LT(max_relative_difference(r, plain), 1e-13);  // measured: at most 5e-16
        testing::expect_close(tensor(r.output), plain.output, 1e-13);
        testing::expect_close(tensor(r.h_n), plain.h_n, 1e-13);
        testing::expect_close(tensor(r.c_n), plain.c_n, 1e-13);
        EXPECT_EQ(r.generator_offset, plain.generator_offset);
      }
    }
  }
}

// The controls: other dropout masks (another seed) move the gradients far beyond the tolerance
// above, and so does dropping the lengths; so neither comparison passes vacuously.
TEST(LstmCheckpoint, ControlsForTheComparisons) {
  Case s;
  s.with_lengths = true;
  const Grads plain = run(s, nn::LSTMOptions());
  Case no_lengths = s;
  no_lengths.with_lengths = false;
  EXPECT_GT(max_relative_difference(run(no_lengths, nn::LSTMOptions().checkpoint_segments(3)), plain), 1e-6);
  Case reseeded = s;
  reseeded.dropout_seed = 24;
  EXPECT_GT(max_relative_difference(run(reseeded, nn::LSTMOptions().checkpoint_layers(true)), plain), 1e-6);
}

// checkpoint_layers inside an outer checkpoint(), dropout drawn from the module's own generator:
// the outer recomputation re-runs the inner checkpoints, whose own recomputations come later still,
// and every one of them must see the forward's masks.
TEST(LstmCheckpoint, NestedInsideCheckpointWithItsOwnGenerator) {
  auto grads_with = [](bool nested, uint64_t dropout_seed) {
    Generator own(1);
    nn::LSTM lstm(kInput, kHidden, nn::LSTMOptions().num_layers(3).dropout(0.4).checkpoint_layers(nested), &own);
    lstm.to(kFloat64);
    Tensor x = testing::leaf({kSteps, kBatch, kInput}, 2);
    own.manual_seed(dropout_seed);
    auto forward = [&](const Tensor& in) { return lstm.forward(in).output; };
    Tensor out = nested ? checkpoint(forward, x) : forward(x);
    sum(mul(out, tanh(out))).backward();
    std::vector<double> g = values(x.grad());
    for (const Tensor& p : lstm.parameters()) {
      std::vector<double> v = values(p.grad());
      g.insert(g.end(), v.begin(), v.end());
    }
    return g;
  };
  const std::vector<double> plain = grads_with(false, 23);
  EXPECT_EQ(grads_with(true, 23), plain);
  EXPECT_NE(grads_with(false, 24), plain);  // control: other masks give other gradients
}

// Backward outside the autocast region (as PyTorch recommends): the recomputation still runs the
// products in bf16, as the forward did, so the gradients are those of the plain module.
TEST(LstmCheckpoint, RecomputesUnderTheForwardsAutocastState) {
  auto grads_with = [](const nn::LSTMOptions& checkpointing) {
    Generator init(5);
    nn::LSTM lstm(8, 16, nn::LSTMOptions(checkpointing).num_layers(3), &init);
    Tensor x = rand({6, 2, 8}, kFloat32, &init);
    Tensor loss;
    {
      amp::AutocastGuard autocast(kCPU, kBFloat16);
      loss = sum(square(lstm.forward(x).output));
    }
    loss.backward();
    return values(lstm.parameters().front().grad());
  };
  const std::vector<double> plain = grads_with(nn::LSTMOptions());
  EXPECT_EQ(grads_with(nn::LSTMOptions().checkpoint_layers(true)), plain);
  // Control: f32 products give other gradients, so the identity shows the bf16 replay.
  Generator init(5);
  nn::LSTM lstm(8, 16, nn::LSTMOptions().num_layers(3), &init);
  Tensor x = rand({6, 2, 8}, kFloat32, &init);
  sum(square(lstm.forward(x).output)).backward();
  EXPECT_NE(values(lstm.parameters().front().grad()), plain);
}

TEST(LstmCheckpoint, WithGradModeOffItIsThePlainForward) {
  Generator init(6);
  nn::LSTM plain(3, 4, nn::LSTMOptions().num_layers(2), &init);
  nn::LSTM segmented(3, 4, nn::LSTMOptions().num_layers(2).checkpoint_segments(3));
  segmented.load_state_dict(plain.state_dict());
  Tensor x = rand({7, 2, 3});
  NoGradGuard no_grad;
  nn::LSTMOutput a = plain.forward(x), b = segmented.forward(x);
  EXPECT_EQ(values(b.output), values(a.output));
  EXPECT_EQ(values(b.h_n), values(a.h_n));
}

TEST(LstmCheckpoint, BadOptions) {
  expect_error([] { nn::LSTM(3, 4, nn::LSTMOptions().checkpoint_segments(0)); },
               {"LSTM", "checkpoint_segments must be at least 1, got 0"});
  expect_error(
      [] { nn::LSTM(3, 4, nn::LSTMOptions().checkpoint_layers(true).implementation(nn::LstmImplementation::CuDNN)); },
      {"LSTM", "checkpoint_layers and checkpoint_segments", "cuDNN"});
  nn::LSTM lstm(3, 4, nn::LSTMOptions().checkpoint_segments(2));
  Tensor x = rand({5, 2, 3});
  expect_error(
      [&] {
        lstm.forward(x, Tensor(), Tensor(), tensor<int64_t>({5, 6}));
      },
      {"LSTM", "sequence length 6 is outside [0, 5]"});
  expect_error(
      [&] {
        lstm.forward(x, Tensor(), Tensor(), tensor<int64_t>({5, 1, 2}));
      },
      {"LSTM", "lengths must be [2]"});
  EXPECT_NE(lstm.str().find("checkpoint_segments=2"), std::string::npos) << lstm.str();
}

// Memory, counted by the CPU allocator: the live bytes after the forward pass and the peak over
// forward and backward, for a 4-layer LSTM (f64, 64 steps).
TEST(LstmCheckpoint, KeepsAndPeaksAtLessMemory) {
  const int64_t steps = 64, batch = 8, hidden = 64, layers = 4;
  struct Measured {
    size_t live, peak;
    std::vector<double> grad;
  };
  auto measure = [&](const nn::LSTMOptions& checkpointing) {
    Generator init(8);
    nn::LSTM lstm(hidden, hidden, nn::LSTMOptions(checkpointing).num_layers(layers), &init);
    lstm.to(kFloat64);
    Tensor x = testing::leaf({steps, batch, hidden}, 9);
    const size_t before = cpu::cpu_memory_stats().allocated_bytes;
    cpu::reset_peak_cpu_memory_stats();
    Tensor loss = sum(lstm.forward(x).output);
    Measured m;
    m.live = cpu::cpu_memory_stats().allocated_bytes - before;
    loss.backward();
    m.peak = cpu::cpu_memory_stats().peak_allocated_bytes - before;
    m.grad = values(x.grad());
    return m;
  };
  const size_t state = static_cast<size_t>(steps * batch * hidden) * sizeof(double);  // one [T, B, H]
  const Measured plain = measure(nn::LSTMOptions());
  const Measured layers_only = measure(nn::LSTMOptions().checkpoint_layers(true));
  const Measured segments = measure(nn::LSTMOptions().checkpoint_segments(8));
  // Negative control: the plain module keeps at least the gates (4 states) and h, c of each layer.
  EXPECT_GE(plain.live, static_cast<size_t>(layers * 6) * state);
  // Per layer: 3 layer outputs and the last layer's activations.
  EXPECT_LT(layers_only.live, plain.live / 2);
  // Per run of 8 steps: the layer outputs, the states at run boundaries, the last run's activations.
  EXPECT_LT(segments.live, static_cast<size_t>(layers + 2) * state);
  EXPECT_LT(segments.peak * 2, plain.peak);
  EXPECT_LT(segments.peak, layers_only.peak);
  EXPECT_EQ(layers_only.grad, plain.grad);
}

}  // namespace
}  // namespace tapegrad
