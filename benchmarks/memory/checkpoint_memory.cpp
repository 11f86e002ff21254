// Peak memory and step time of a named LSTM configuration (default lstm_large:64) with the LSTM's
// gradient checkpointing over runs of steps (LSTMOptions::checkpoint_segments) or without it.
// One variant per process, so that the process's peak RSS (VmHWM) is this variant's: run it once per
// variant, alternating them (benchmarks/memory/run_checkpoint_memory.sh does), and compare.
//
//   checkpoint_memory --config lstm_large:64 --segments 8 --threads 2
//
// The model is the configuration's LstmClassifier (LSTM, then Linear on the last hidden state,
// cross-entropy, Adam) with the option set. Printed: the median (and best) step time, and the
// forward pass's alone (the part a recomputation repeats); the CPU
// allocator's peak of live bytes over the training steps, less what was live before them and less
// the parameters' gradients and Adam's two moments, i.e. the activations and the backward's
// scratch ("activations"); and the process's peak RSS, with its growth over the steps. The RSS
// also counts the allocator's cache of freed blocks, which keeps blocks of the sizes one variant
// frees for requests of other sizes, so it overstates the live peak (more so with many runs).
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/step_timer.h"
#include "common/system_info.h"
#include "models/named_configs.h"
#include "tapegrad/tapegrad.h"
// The CPU allocator's statistics have no public header yet; the tests read them the same way.
#include "cpu/runtime/caching_allocator.h"

namespace {

using namespace tapegrad;

// A field of /proc/self/status in MiB ("VmRSS", "VmHWM"); 0 where it is missing.
double status_mib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::strtod(line.c_str() + field.size() + 1, nullptr) / 1024.0;
  return 0;
}

class CheckpointedClassifier : public nn::Module {
 public:
  CheckpointedClassifier(const bench::ModelShape& shape, int64_t segments, Generator* generator) {
    lstm_ =
        register_module("lstm", std::make_shared<nn::LSTM>(shape.input_size, shape.hidden_size,
                                                           nn::LSTMOptions().checkpoint_segments(segments), generator));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(shape.hidden_size, shape.num_classes, true, generator));
  }
  Tensor forward(const Tensor& x) { return fc_->forward(lstm_->forward(x).h_n.select(0, 0)); }

 private:
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("checkpoint_memory", "peak memory and step time of an LSTM with checkpoint_segments");
  cli.add_options()("config", "named configuration:batch (an LSTM one)",
                    cxxopts::value<std::string>()->default_value("lstm_large:64"))(
      "segments", "LSTMOptions::checkpoint_segments (1: no checkpointing)",
      cxxopts::value<int64_t>()->default_value("1"))("threads", "CPU threads (0: OpenMP's default)",
                                                     cxxopts::value<int>()->default_value("2"))(
      "budget", "seconds of timed steps", cxxopts::value<double>()->default_value("4"))("h,help", "this help");
  try {
    auto args = cli.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", cli.help().c_str());
      return 0;
    }
    const std::string spec = args["config"].as<std::string>();
    const size_t colon = spec.find(':');
    const bench::NamedConfig& config = bench::named_config(spec.substr(0, colon));
    const int64_t batch = colon == std::string::npos ? config.batch_sizes.front() : std::stoll(spec.substr(colon + 1));
    TG_CHECK(config.shape.kind == bench::ModelKind::Lstm, "checkpoint_memory: '", config.name,
             "' is not an LSTM classifier configuration");
    const int64_t segments = args["segments"].as<int64_t>();
    if (args["threads"].as<int>() > 0) set_num_threads(args["threads"].as<int>());

    Generator generator(0);
    CheckpointedClassifier model(config.shape, segments, &generator);
    std::vector<bench::Batch> batches = bench::make_batches(config.shape, batch, 2, &generator);
    std::vector<Tensor> params = model.parameters();
    optim::Adam adam(params, optim::AdamOptions(config.lr));
    size_t param_bytes = 0;
    for (const Tensor& p : params) param_bytes += static_cast<size_t>(p.numel()) * p.itemsize();
    // Touches the BLAS's buffers with a large product first, so that they are not counted as the
    // step's memory.
    {
      NoGradGuard no_grad;
      (void)matmul(randn({2048, 2048}), randn({2048, 2048})).sum().item();
    }

    const double rss_before = status_mib("VmRSS");
    const size_t live_before = cpu::cpu_memory_stats().allocated_bytes;
    cpu::reset_peak_cpu_memory_stats();
    int next = 0;
    auto step = [&] {
      const bench::Batch& b = batches[static_cast<size_t>(next++ % 2)];
      adam.zero_grad();
      Tensor loss = cross_entropy(model.forward(b.x), b.y);
      loss.backward();
      adam.step();
      (void)loss.item();
    };
    bench::TimingPlan plan;
    plan.budget_s = args["budget"].as<double>();
    const bench::StepTiming timing = bench::time_steps(
        step, [] {}, plan);
    const size_t step_peak = cpu::cpu_memory_stats().peak_allocated_bytes;
    // The forward pass alone (recorded, then dropped): what a recomputation repeats, so
    // 1 + (s - 1) / s * forward / step is the step-time ratio that checkpointing cannot beat.
    auto forward_only = [&] {
      const bench::Batch& b = batches[static_cast<size_t>(next++ % 2)];
      (void)cross_entropy(model.forward(b.x), b.y).item();
    };
    plan.warmup_steps = 1;
    plan.budget_s = args["budget"].as<double>() / 2;
    const bench::StepTiming forward_timing = bench::time_steps(
        forward_only, [] {}, plan);
    const double hwm = status_mib("VmHWM");  // the forward-only passes peak lower than a step
    constexpr double kMiB = 1024.0 * 1024.0;
    const double fixed = 3.0 * static_cast<double>(param_bytes) / kMiB;  // grads, Adam's m and v
    const double live_peak = static_cast<double>(step_peak - live_before) / kMiB;
    std::printf("%s\n", bench::describe(bench::system_info()).c_str());
    std::printf("config %s:%lld (%s), segments %lld\n", config.name.c_str(), static_cast<long long>(batch),
                config.summary.c_str(), static_cast<long long>(segments));
    std::printf(
        "result segments=%lld step_ms=%.1f min_ms=%.1f forward_ms=%.1f forward_min_ms=%.1f steps=%d "
        "activations_mib=%.1f live_peak_mib=%.1f "
        "grads_adam_mib=%.1f peak_rss_mib=%.1f rss_growth_mib=%.1f\n",
        static_cast<long long>(segments), timing.median_ms, timing.min_ms, forward_timing.median_ms,
        forward_timing.min_ms, timing.steps, live_peak - fixed, live_peak, fixed, hwm, hwm - rss_before);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_memory: %s\n", e.what());
    return 1;
  }
  return 0;
}
