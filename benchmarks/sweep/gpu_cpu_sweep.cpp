// gpu_cpu_sweep: is the GPU faster than the CPU for this model, and from what batch size?
// Trains the same models on the CPU and on CUDA over a grid of batch sizes, widths, hidden sizes
// and sequence lengths, timing whole training steps the same way on both, and writes a table,
// sweep.csv, sweep.json and a plot with the crossover batch size of each model marked. It also
// times the host-to-device copy of one batch (pageable and pinned memory). Without a GPU it says
// so and measures the CPU side alone.
#include <cstdio>
#include <cxxopts.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "sweep_grid.h"
#include "sweep_report.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

// Lines of the closing "work per step" list: what one step asked of the GPU.
std::vector<std::string> g_step_counts;

StepTiming time_training(const std::string& name, const ModelShape& shape, int64_t batch, Device device,
                         const TimingPlan& plan) {
  TrainingRun run(shape, batch, device);
  if (device.is_cuda()) {
    run.step();  // the first step allocates the optimiser state
    const cuda::Counters c = step_counts(run);
    char line[256];
    std::snprintf(line, sizeof(line), "  %-16s b=%-5lld %6llu launches %5llu gemms %4llu copies %3llu host syncs",
                  name.c_str(), static_cast<long long>(batch), static_cast<unsigned long long>(c.launches),
                  static_cast<unsigned long long>(c.gemms), static_cast<unsigned long long>(c.copies),
                  static_cast<unsigned long long>(c.host_syncs));
    g_step_counts.push_back(line);
  }
  return time_steps([&] { run.step(); }, [&] { run.synchronize(); }, plan);
}

// Host-to-device copy of one batch (inputs and targets), median over repeats. From pinned memory
// the copies are asynchronous, so each block ends with a synchronise, as the training steps do.
double time_copy(const Tensor& x, const Tensor& y, const TimingPlan& plan) {
  StepTiming t = time_steps(
      [&] {
        (void)x.to(kCUDA);
        (void)y.to(kCUDA);
      },
      [&] { synchronize(kCUDA); }, plan);
  return t.median_ms;
}

void measure_copies(const SweepCurve& curve, SweepPoint& point, const TimingPlan& plan) {
  Batch b = make_batches(curve.shape, point.batch, 1).front();
  point.copy_pageable_ms = time_copy(b.x, b.y, plan);
  point.copy_pinned_ms = time_copy(b.x.pin_memory(), b.y.pin_memory(), plan);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("gpu_cpu_sweep",
                       "Times training steps on the CPU and the GPU over a grid; finds where the GPU starts to win.");
  cli.add_options()("quick",
                    "a small grid that finishes in under a minute (with --curves: their curves, timed as briefly)")(
      "out", "folder for sweep.csv, sweep.json and the plot",
      cxxopts::value<std::string>()->default_value("sweep_out"))("threads", "CPU threads (0: OpenMP's default)",
                                                                 cxxopts::value<int>()->default_value("0"))(
      "budget", "seconds of timed steps per point and device (0: 0.15 with --quick, else 1)",
      cxxopts::value<double>()->default_value("0"))(
      "curves", "only these curves of the full grid, comma-separated as named in the table (\"char_lstm,mlp W=256\")",
      cxxopts::value<std::string>())("cpu-only", "skip the GPU even when one is present")("h,help", "this help");
  try {
    cxxopts::ParseResult args = cli.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", cli.help().c_str());
      return 0;
    }
    if (args["threads"].as<int>() > 0) set_num_threads(args["threads"].as<int>());
    const bool quick = args.count("quick") > 0;
    const std::string out_dir = args["out"].as<std::string>();
    TimingPlan plan;
    plan.budget_s = args["budget"].as<double>() > 0 ? args["budget"].as<double>() : (quick ? 0.15 : 1.0);
    TimingPlan copy_plan = plan;
    copy_plan.budget_s = std::min(plan.budget_s, 0.1);

    // Chosen first, so that a wrong name fails before anything is measured.
    const std::vector<SweepCurve> curves =
        args.count("curves") ? select_curves(sweep_grid(false), args["curves"].as<std::string>()) : sweep_grid(quick);

    SweepReport report;
    report.system = system_info();
    report.quick = quick;
    report.gpu_found = cuda::is_available() && !args.count("cpu-only");
    std::printf("gpu_cpu_sweep%s\n%s", quick ? " --quick" : "", describe(report.system).c_str());
    if (!report.gpu_found) {
      std::printf("%s: measuring the CPU side only.\n",
                  cuda::is_available() ? "--cpu-only given" : "No GPU found (no CUDA device, driver or CUDA build)");
    }
    std::fflush(stdout);

    Stopwatch total;
    for (const SweepCurve& curve : curves) {
      CurveResult result{curve, {}};
      for (int64_t batch : curve.batches) {
        SweepPoint point;
        point.batch = batch;
        point.batch_bytes =
            curve.shape.kind == ModelKind::CharLm
                ? shape_numel(input_shape(curve.shape, batch)) * 16 + batch * 8  // i64 ids, targets, lengths
                : shape_numel(input_shape(curve.shape, batch)) * 4 + batch * 8;  // f32 inputs, i64 targets
        point.cpu = time_training(curve.name, curve.shape, batch, kCPU, plan);
        if (report.gpu_found) {
          try {
            point.gpu = time_training(curve.name, curve.shape, batch, kCUDA, plan);
            measure_copies(curve, point, copy_plan);
          } catch (const std::exception& e) {
            point.gpu_error = e.what();
          }
        }
        result.points.push_back(point);
      }
      report.curves.push_back(std::move(result));
      std::fprintf(stderr, "  %s done (%.0f s)\n", curve.name.c_str(), total.seconds());
    }

    std::printf("%s\n", format_table(report).c_str());
    if (!g_step_counts.empty()) {
      std::printf("CUDA work per training step (one step after a warm-up, loss not read):\n");
      for (const std::string& line : g_step_counts) std::printf("%s\n", line.c_str());
      std::printf("\n");
    }
    std::filesystem::create_directories(out_dir);
    const std::string plot = out_dir + (report.gpu_found ? "/speedup.svg" : "/cpu_throughput.svg");
    write_csv(report, out_dir + "/sweep.csv");
    write_json(report, out_dir + "/sweep.json");
    write_plot(report, plot);
    std::printf("wrote %s/sweep.csv, %s/sweep.json and %s (%.0f s in all)\n", out_dir.c_str(), out_dir.c_str(),
                plot.c_str(), total.seconds());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_cpu_sweep: %s\n", e.what());
    return 1;
  }
  return 0;
}
