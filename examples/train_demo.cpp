// train_demo: trains a small two-layer classifier on a synthetic task with the raw tensor and
// autograd API (no modules yet) and prints the falling loss and the accuracy (also logged with
// --metrics / --tensorboard).
//
// The task: 4 random features per sample; the class is the index of the largest feature.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cxxopts.hpp>

#include "example_util.h"
#include "metrics_cli.h"
#include "output_paths.h"
#include "profile_cli.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  cxxopts::Options cli("train_demo", "Trains a 4-32-4 MLP with SGD on a synthetic task.");
  cli.add_options()("steps", "training steps (>= 1)", cxxopts::value<std::string>()->default_value("300"))(
      "seed", "random seed", cxxopts::value<std::string>()->default_value("0"))(
      "threads", "CPU threads (0: OpenMP's default)", cxxopts::value<std::string>()->default_value("0"))("h,help",
                                                                                                         "this help");
  examples::add_metrics_options(cli);
  examples::add_profile_options(cli);
  return examples::run_example("train_demo", [&] {
    std::optional<cxxopts::ParseResult> parsed = examples::parse_command_line(cli, argc, argv);
    if (!parsed) return 0;
    examples::check_output_paths({}, examples::logging_outputs(*parsed));
    examples::ProfileSession profile(*parsed);
    const int steps = static_cast<int>(examples::int_flag(*parsed, "steps", 1, 1'000'000'000));
    std::unique_ptr<observe::MetricsLogger> metrics = examples::open_metrics(*parsed);
    const double lr = 0.5;
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
    examples::Stopwatch interval;
    int last_logged = 0;
    for (int step = 0; step <= steps; ++step) {
      Tensor logits = linear(relu(linear(x, w1, b1)), w2, b2);
      Tensor loss = cross_entropy(logits, labels);
      if (step % 50 == 0 || step == steps) {
        const double value = loss.item();
        examples::check_finite_loss(value, "step " + std::to_string(step));
        double accuracy = eq(argmax(logits, 1), labels).to(kFloat32).mean().item();
        std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, value, accuracy);
        // Examples per second since the previous line (the first line has trained none yet).
        const double rate = step > 0 ? double(step - last_logged) * double(batch) / interval.seconds() : 0.0;
        metrics->log(
            step,
            {{"train/loss", value}, {"train/accuracy", accuracy}, {"lr", lr}, {"throughput/examples_per_s", rate}});
        last_logged = step;
        interval = examples::Stopwatch();
      }
      loss.backward();
      NoGradGuard no_grad;
      for (Tensor* p : params) {
        p->sub_(p->grad(), lr);
        p->set_grad(Tensor());
      }
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d steps in %.3f s (%.3f ms/step)\n", steps, seconds, 1000.0 * seconds / steps);
    return 0;
  });
}
