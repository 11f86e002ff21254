// train_demo: trains a small two-layer classifier on a synthetic task with the raw tensor and
// autograd API (no modules yet) and prints the falling loss and the accuracy.
//
// The task: 4 random features per sample; the class is the index of the largest feature.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "tapegrad/tapegrad.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  int steps = 300;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::printf("usage: train_demo [--steps N]\nTrains a 4-32-4 MLP with SGD on a synthetic task.\n");
      return 0;
    }
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::atoi(argv[++i]);
  }
  try {
    manual_seed(0);
    const int64_t batch = 256, features = 4, hidden = 32, classes = 4;
    Tensor x = randn({batch, features});
    Tensor labels = argmax(x, 1);

    // PyTorch's Linear initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    auto init = [](Shape shape, int64_t fan_in) {
      double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      Tensor t = empty(shape);
      uniform_(t, -bound, bound);
      return t.requires_grad_();
    };
    Tensor w1 = init({hidden, features}, features), b1 = init({hidden}, features);
    Tensor w2 = init({classes, hidden}, hidden), b2 = init({classes}, hidden);
    std::vector<Tensor*> params{&w1, &b1, &w2, &b2};

    auto start = std::chrono::steady_clock::now();
    for (int step = 0; step <= steps; ++step) {
      Tensor logits = linear(relu(linear(x, w1, b1)), w2, b2);
      Tensor loss = cross_entropy(logits, labels);
      if (step % 50 == 0) {
        double accuracy = eq(argmax(logits, 1), labels).to(kFloat32).mean().item();
        std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, loss.item(), accuracy);
      }
      loss.backward();
      NoGradGuard no_grad;
      for (Tensor* p : params) {
        p->sub_(p->grad(), 0.5);
        p->set_grad(Tensor());
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d steps in %.3f s (%.3f ms/step)\n", steps, seconds, 1000.0 * seconds / steps);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
