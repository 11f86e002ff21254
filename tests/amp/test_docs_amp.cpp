// The training-loop example of docs/amp.md, copied verbatim (between the markers) so the doc keeps
// compiling; the test runs it and checks the copy against the doc.
#include <fstream>
#include <sstream>
#include <string>

#include "support/test_util.h"

namespace {

using namespace tapegrad;

// ---- verbatim from docs/amp.md ----
// A two-layer classifier with loss scaling, clipping of the true gradients, and its first layer
// checkpointed (recomputed in backward instead of kept), dropout included.
double train_with_amp(int steps) {
  manual_seed(0);
  nn::Linear fc1(20, 64), fc2(64, 5);
  std::vector<Tensor> params = {fc1.weight, fc1.bias, fc2.weight, fc2.bias};
  optim::SGD opt(params, optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler;  // init_scale 65536, x2 after 2000 good steps, x0.5 after a bad one
  Tensor x = randn({32, 20});
  Tensor y = randint(0, 5, {32});
  double last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor hidden = checkpoint([&](const Tensor& in) { return dropout(relu(fc1.forward(in)), 0.1); }, x);
    Tensor loss = cross_entropy(fc2.forward(hidden), y);
    scaler.scale(loss).backward();            // gradients are scale times too large
    scaler.unscale_(opt);                     // now they are the true ones
    nn::utils::clip_grad_norm_(params, 1.0);  // so clipping sees the true norm
    scaler.step(opt);                         // skipped when any gradient is inf or NaN
    scaler.update();                          // back off, or grow after growth_interval good steps
    last_loss = loss.item();
  }
  return last_loss;
}
// ---- end of the verbatim copy ----

TEST(DocsAmp, TheExampleTrains) {
  const double first = train_with_amp(1), later = train_with_amp(30);
  EXPECT_LT(later, 0.5 * first);
}

TEST(DocsAmp, TheCopyAboveIsVerbatim) {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string doc = read(TAPEGRAD_SOURCE_DIR "/docs/amp.md");
  const std::string self = read(TAPEGRAD_SOURCE_DIR "/tests/amp/test_docs_amp.cpp");
  const std::string open = "```cpp\n";
  const size_t start = doc.find(open, doc.find("## A training loop"));  // that section's example
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("```", start + open.size());
  ASSERT_NE(end, std::string::npos);
  const std::string block = doc.substr(start + open.size(), end - start - open.size());
  EXPECT_GT(block.size(), 200u);
  EXPECT_NE(self.find("// ---- verbatim from docs/amp.md ----\n" + block + "// ---- end of the verbatim copy ----"),
            std::string::npos)
      << "docs/amp.md and tests/amp/test_docs_amp.cpp disagree; copy the doc's example again";
}

}  // namespace
