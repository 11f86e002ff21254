// Inference on CUDA (docs/inference.md): the forward under InferenceMode, captured once as a CUDA
// graph at a fixed shape and replayed on new inputs copied into the captured input, gives the
// eager forward's numbers: an MLP and a two-layer LSTM with a linear head.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "support/gpu.h"
#include "support/random_values.h"
#include "tapegrad/cuda/graph.h"
#include "tapegrad/cuda/memory.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

using testing::uniform;

#define SKIP_WITHOUT_GRAPHS()             \
  SKIP_WITHOUT_GPU();                     \
  if (!cuda::caching_allocator_enabled()) \
  GTEST_SKIP() << "TAPEGRAD_CUDA_CACHING_ALLOCATOR=0: cuda::Graph needs the caching allocator's pools"

// Captures forward(static_input) once, then for each input: copy it in, replay, compare with the
// eager forward of the same input.
template <class Forward>
void expect_replays_match_eager(const Forward& forward, const Shape& input_shape) {
  InferenceMode guard;
  Tensor static_input = uniform(input_shape, kFloat32, 1).to(kCUDA);
  for (int i = 0; i < 2; ++i) forward(static_input);  // warm-up: workspaces, kept layouts
  cuda::Graph graph;
  Tensor static_output;
  graph.capture_begin();
  static_output = forward(static_input);
  graph.capture_end();
  for (uint64_t seed = 2; seed < 5; ++seed) {
    Tensor x = uniform(input_shape, kFloat32, seed).to(kCUDA);
    static_input.copy_(x);
    graph.replay();
    Tensor eager = forward(x);
    EXPECT_TRUE(allclose(static_output.cpu(), eager.cpu(), 1e-6, 1e-6)) << "input seed " << seed;
  }
  // Negative control: an input that was not copied in leaves the replay's output as it was.
  Tensor before = static_output.cpu();
  Tensor other = uniform(input_shape, kFloat32, 9).to(kCUDA);
  graph.replay();
  EXPECT_TRUE(allclose(static_output.cpu(), before, 0.0, 0.0));
  EXPECT_FALSE(allclose(forward(other).cpu(), before, 1e-6, 1e-6));
}

TEST(CudaInference, CapturedMlpForwardReplaysTheEagerNumbers) {
  SKIP_WITHOUT_GRAPHS();
  Generator g(3);
  nn::Sequential mlp(nn::Linear(12, 32, true, &g), nn::ReLU(), nn::Linear(32, 4, true, &g));
  mlp.to(kCUDA);
  mlp.eval();
  expect_replays_match_eager([&](const Tensor& x) { return mlp.forward(x); }, {1, 12});
}

TEST(CudaInference, CapturedLstmForwardReplaysTheEagerNumbers) {
  SKIP_WITHOUT_GRAPHS();
  Generator g(4);
  nn::LSTM lstm(6, 16, nn::LSTMOptions().num_layers(2), &g);
  nn::Linear head(16, 5, true, &g);
  lstm.to(kCUDA);
  head.to(kCUDA);
  lstm.eval();
  expect_replays_match_eager(
      [&](const Tensor& x) {
        nn::LSTMOutput o = lstm.forward(x);
        return head.forward(o.h_n.select(0, 1));
      },
      {5, 2, 6});
}

}  // namespace
}  // namespace tapegrad
