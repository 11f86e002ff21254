// mlp_seed: the classic model of the GPU-vs-CPU tutorials, Linear(1000, 512)-ReLU-Linear(512, 10)
// trained with Adam (lr 1e-3) and cross-entropy on random data, batch 64, 1000 batches. Prints the
// loss every 100 batches and the mean time per training step; --metrics / --tensorboard log the
// loss, learning rate and examples/s at those points; --summary prints the model's summary first.
// --distributed (under mpirun): each process trains its slice of every batch of batch-size x N.
// --cuda-graph: the step captured once in a CUDA graph and replayed (cuda_graph_cli.h).
#include <cstdio>
#include <cxxopts.hpp>

#include "amp_cli.h"
#include "cuda_graph_cli.h"
#include "distributed_cli.h"
#include "example_util.h"
#include "metrics_cli.h"
#include "output_paths.h"
#include "profile_cli.h"

using namespace tapegrad;

int main(int argc, char** argv) {
  cxxopts::Options cli("mlp_seed", "Trains Linear(1000,512)-ReLU-Linear(512,10) on random data and times the steps.");
  cli.add_options()("device", "cpu, cuda, cuda:N or auto", cxxopts::value<std::string>()->default_value("auto"))(
      "batches", "training steps (>= 1)", cxxopts::value<std::string>()->default_value("1000"))(
      "batch-size", "examples per step (>= 1)", cxxopts::value<std::string>()->default_value("64"))(
      "lr", "Adam learning rate (> 0)", cxxopts::value<std::string>()->default_value("1e-3"))(
      "seed", "random seed", cxxopts::value<std::string>()->default_value("0"))(
      "threads", "CPU threads (0: OpenMP's default)", cxxopts::value<std::string>()->default_value("0"))(
      "summary", "print the model's summary (layers, output shapes, parameters, memory) first")("h,help", "this help");
  examples::add_metrics_options(cli);
  examples::add_profile_options(cli);
  examples::add_distributed_options(cli);
  examples::add_amp_options(cli);
  examples::add_cuda_graph_options(cli);
  return examples::run_example("mlp_seed", [&] {
    std::optional<cxxopts::ParseResult> parsed = examples::parse_command_line(cli, argc, argv);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    examples::check_output_paths({}, examples::logging_outputs(args));
    examples::ProfileSession profile(args);
    const int batches = static_cast<int>(examples::int_flag(args, "batches", 1, 1'000'000'000));
    // The pool below holds 16 batches of 1000 floats each: its size is checked by the library.
    const int64_t batch_size = examples::int_flag(args, "batch-size", 1, int64_t{1} << 40);
    const double lr = examples::real_flag(args, "lr", 0.0, 1e6, true);
    const examples::DistributedRun run(args);
    const Device device = run.pick_device(args["device"].as<std::string>());
    examples::AmpSession amp(args, device);
    examples::GraphedStep graphed(args, device);
    std::unique_ptr<observe::MetricsLogger> metrics = run.open_metrics(args);

    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(1000, 512), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 10)});
    model->to(device);
    const auto ddp = run.wrap(*model);
    optim::Adam opt(model->parameters(), optim::AdamOptions(lr).capturable(graphed.enabled()));
    nn::CrossEntropyLoss loss_fn;

    // A pool of random batches made up front, so the timing is of training alone. Every rank draws
    // the same global batches (batch_size x ranks) and keeps its slice of each.
    const int pool = 16;
    const int64_t global_batch = batch_size * run.size(), first = batch_size * run.rank();
    std::vector<Tensor> xs, ys;
    for (int i = 0; i < pool; ++i) {
      xs.push_back(randn({global_batch, 1000}).narrow(0, first, batch_size).contiguous().to(device));
      ys.push_back(randint(0, 10, {global_batch}).narrow(0, first, batch_size).contiguous().to(device));
    }
    if (args.count("summary")) {
      nn::SummaryOptions summary_options;
      summary_options.optimizer_state_bytes_per_element = 8;  // Adam's two float32 moments
      std::printf("%s", nn::summary(*model, xs[0], summary_options).table.c_str());
    }
    std::printf("mlp_seed on %s%s%s%s: %d batches of %lld, %d threads\n", device.str().c_str(), run.describe().c_str(),
                amp.describe().c_str(), graphed.describe().c_str(), batches, static_cast<long long>(global_batch),
                get_num_threads());
    std::fflush(stdout);  // seen at once through a pipe (tee, a test), not when the buffer fills
    examples::Stopwatch total, interval;
    int last_logged = 0;
    for (int step = 1; step <= batches; ++step) {
      Tensor loss = graphed.run(xs[step % pool], ys[step % pool], [&](const Tensor& x, const Tensor& y) {
        Tensor l = loss_fn(ddp ? ddp->forward(x) : model->forward(x), y);
        opt.zero_grad();
        amp.backward_and_step(l, opt);
        return l;
      });
      // Read only where printed: a read per step would be a device sync per step on a GPU.
      if (step % 100 == 0 || step == batches) {
        const double value = run.sum(loss.item()) / run.size();  // every rank's slice weighs the same
        examples::check_finite_loss(value, "batch " + std::to_string(step));
        std::printf("batch %5d  loss %.4f\n", step, value);
        const double seconds = run.max(interval.seconds());  // the slowest rank sets the pace
        metrics->log(step,
                     {{"train/loss", value},
                      {"lr", lr},
                      {"throughput/examples_per_s", double(step - last_logged) * double(global_batch) / seconds}});
        last_logged = step;
        interval = examples::Stopwatch();
      }
    }
    const double seconds = run.max(total.seconds());
    std::printf("mean step time: %.3f ms (%d steps, %.2f s)\n", 1000.0 * seconds / batches, batches, seconds);
    return 0;
  });
}
