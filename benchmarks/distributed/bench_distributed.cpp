// bench_distributed: what data parallelism costs on this machine, run under mpirun.
//   --models mlp_seed:1024,...  DDP training steps of named configurations (benchmarks/models),
//                               the global batch split evenly over the ranks: step time,
//                               throughput, and the communication the step waited for.
//   --zero                      also the same DDP steps with ZeroRedundancyOptimizer (Adam's state
//                               sharded over the ranks): mode "zero"; the last column is the
//                               optimiser-state bytes of the rank that holds the most.
//   --allreduce                 MPI_Allreduce (float32 sum, in place) and ProcessGroup::all_reduce
//                               (average, as DDP calls it) at 4 KiB to 64 MiB.
// Rank 0 prints one CSV line per measurement; benchmarks/distributed/run_distributed.sh launches
// the 1-rank and 2-rank sides alternately and summarises. Every rank runs the same fixed number of
// steps (an adaptive count could differ between ranks and leave one waiting in a collective).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/step_timer.h"
#include "models/named_configs.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The largest of every rank's value: a job goes at its slowest rank's pace.
double max_over_ranks(distributed::ProcessGroup* group, double value) {
  if (!group) return value;
  Tensor t = tensor(std::vector<double>{value}, {1});
  group->all_reduce(t, distributed::ReduceOp::Max);
  return t.item();
}

// One named configuration at a global batch: `steps` timed DDP steps after `warmup` untimed ones.
// sync = false trains every rank on its own (no DDP): the compute the step would take without
// communication, under the same sharing of the cores.
void time_model(const std::string& spec, int steps, int warmup, bool sync,
                const std::shared_ptr<distributed::ProcessGroup>& group, bool zero = false) {
  const size_t colon = spec.find(':');
  const bench::NamedConfig& config = bench::named_config(spec.substr(0, colon));
  const int64_t global_batch =
      colon == std::string::npos ? config.batch_sizes.front() : std::stoll(spec.substr(colon + 1));
  const int ranks = group ? group->size() : 1;
  TG_CHECK(global_batch % ranks == 0, "bench_distributed: batch ", global_batch, " of ", spec, " does not split over ",
           ranks, " ranks");
  // The run's model and batches; the step is written out here to time its phases.
  bench::TrainingRun run(config.shape, global_batch / ranks, kCPU, 0, config.lr);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (zero)
    optimizer = std::make_unique<distributed::ZeroRedundancyOptimizer>(
        run.model().parameters(), group, [lr = config.lr](std::vector<optim::ParamGroup> groups) {
          return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions(lr));
        });
  else
    optimizer = std::make_unique<optim::Adam>(run.model().parameters(), optim::AdamOptions(config.lr));
  optim::Optimizer& opt = *optimizer;
  int64_t next = 0;
  std::vector<double> forward_ms, backward_ms, optimizer_ms;
  auto step = [&](bool timed) {
    const bench::Batch& batch = run.batches()[size_t(next++ % int64_t(run.batches().size()))];
    const Clock::time_point t0 = Clock::now();
    Tensor loss = bench::training_loss(config.shape, run.model(), batch);
    const Clock::time_point t1 = Clock::now();
    opt.zero_grad();
    loss.backward();  // with DDP: returns once the gradients are averaged
    const Clock::time_point t2 = Clock::now();
    opt.step();
    loss.item();
    if (timed) {
      forward_ms.push_back(ms(t1 - t0));
      backward_ms.push_back(ms(t2 - t1));
      optimizer_ms.push_back(ms(Clock::now() - t2));
    }
  };
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  const bool reduce = group && sync && ranks > 1;  // one rank is plain training, no DDP
  if (reduce) {
    std::shared_ptr<nn::Module> view(&run.model(), [](nn::Module*) {});
    ddp = std::make_unique<distributed::DistributedDataParallel>(view, group);
  }
  for (int i = 0; i < warmup; ++i) step(false);
  if (group) group->barrier();
  std::vector<double> step_ms, exposed_ms, busy_ms;
  const Clock::time_point all_start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    const Clock::time_point start = Clock::now();
    step(true);
    step_ms.push_back(ms(Clock::now() - start));
    if (ddp) {
      // Exposed: from the last gradient (the last bucket ready) until every bucket's all-reduce had
      // finished, the time backward() could only wait. Busy: the all-reduces' own durations.
      Clock::time_point last_ready{}, last_finished{};
      double busy = 0;
      for (const auto& b : ddp->last_bucket_timings()) {
        last_ready = std::max(last_ready, b.ready);
        last_finished = std::max(last_finished, b.finished);
        busy += ms(b.finished - b.started);
      }
      exposed_ms.push_back(std::max(0.0, ms(last_finished - last_ready)));
      busy_ms.push_back(busy);
    }
  }
  const double total_s = max_over_ranks(group.get(), std::chrono::duration<double>(Clock::now() - all_start).count());
  const double median_ms = max_over_ranks(group.get(), bench::median(step_ms));
  const double exposed = max_over_ranks(group.get(), bench::median(exposed_ms));
  const double busy = max_over_ranks(group.get(), bench::median(busy_ms));
  const double min_ms = max_over_ranks(group.get(), *std::min_element(step_ms.begin(), step_ms.end()));
  const double fwd = max_over_ranks(group.get(), bench::median(forward_ms));
  const double bwd = max_over_ranks(group.get(), bench::median(backward_ms));
  const double upd = max_over_ranks(group.get(), bench::median(optimizer_ms));
  const int buckets = ddp ? int(ddp->bucket_parameter_names().size()) : 0;
  const double state_bytes = max_over_ranks(
      group.get(), zero ? double(static_cast<distributed::ZeroRedundancyOptimizer&>(opt).local_state_bytes())
                        : double(distributed::optimizer_state_bytes(opt)));
  if (!group || group->rank() == 0)
    std::printf("model,%s,%lld,%d,%d,%s,%.3f,%.1f,%.3f,%.3f,%.3f,%d,%.3f,%.3f,%.3f,%.3f,%.0f\n", config.name.c_str(),
                static_cast<long long>(global_batch), ranks, get_num_threads(),
                zero     ? "zero"
                : reduce ? "ddp"
                : sync   ? "single"
                         : "nosync",
                median_ms, double(global_batch) * steps / total_s, exposed, busy,
                median_ms > 0 ? exposed / median_ms : 0.0, buckets, min_ms, fwd, bwd, upd, state_bytes);
  std::fflush(stdout);
}

// MPI_Allreduce straight, then through the ProcessGroup (its argument check and worker thread
// included), each op timed alone between barriers; the median of `iters` ops.
void time_allreduce(const std::shared_ptr<distributed::ProcessGroup>& group) {
  for (int64_t bytes = 4 << 10; bytes <= (int64_t{64} << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    const int iters = int(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 5, 200));
    Tensor t = ones({n});
    std::vector<double> mpi_us, group_us;
    for (int i = 0; i < iters + 2; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const Clock::time_point start = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, t.data<float>(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (i >= 2) mpi_us.push_back(1000 * ms(Clock::now() - start));
    }
    for (int i = 0; i < iters + 2; ++i) {
      group->barrier();
      const Clock::time_point start = Clock::now();
      group->all_reduce(t, distributed::ReduceOp::Avg);
      if (i >= 2) group_us.push_back(1000 * ms(Clock::now() - start));
    }
    const double mpi = max_over_ranks(group.get(), bench::median(mpi_us));
    const double pg = max_over_ranks(group.get(), bench::median(group_us));
    const double mpi_min = max_over_ranks(group.get(), *std::min_element(mpi_us.begin(), mpi_us.end()));
    const double pg_min = max_over_ranks(group.get(), *std::min_element(group_us.begin(), group_us.end()));
    if (group->rank() == 0)
      std::printf("allreduce,%lld,%d,%d,%.1f,%.1f,%.3f,%.1f,%.1f\n", static_cast<long long>(bytes), group->size(),
                  iters, mpi, pg, double(bytes) / (mpi * 1e-6) / 1e9, mpi_min, pg_min);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("bench_distributed",
                       "Times DDP training steps and all-reduce under mpirun (see the file's head).");
  cli.add_options()("models", "comma-separated name[:global batch] list",
                    cxxopts::value<std::string>()->default_value(""))(
      "allreduce", "time all-reduce at 4 KiB to 64 MiB")("steps", "timed steps per model",
                                                         cxxopts::value<int>()->default_value("30"))(
      "warmup", "untimed steps first", cxxopts::value<int>()->default_value("3"))(
      "nosync", "also time the steps without DDP (compute alone)")(
      "zero", "also time the DDP steps with ZeroRedundancyOptimizer")(
      "threads", "CPU threads per rank", cxxopts::value<int>()->default_value("1"))("header", "print the CSV headers")(
      "h,help", "this help");
  try {
    const cxxopts::ParseResult args = cli.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", cli.help().c_str());
      return 0;
    }
    set_num_threads(args["threads"].as<int>());
    // SERIALIZED, the level the ProcessGroup needs; initialised here so that --allreduce may also
    // call MPI itself (never while a ProcessGroup collective is running).
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    {
      std::shared_ptr<distributed::ProcessGroup> group = distributed::init_process_group();
      if (args.count("header") && group->rank() == 0)
        std::printf(
            "# model,name,global_batch,ranks,threads,mode,step_ms,examples_per_s,exposed_comm_ms,comm_busy_ms,"
            "exposed_fraction,buckets,min_step_ms,forward_ms,backward_ms,optimizer_ms,optimizer_state_bytes\n# "
            "allreduce,bytes,ranks,iters,mpi_us,process_group_us,mpi_algbw_GBps,"
            "mpi_min_us,process_group_min_us\n");
      if (args.count("allreduce")) time_allreduce(group);
      std::stringstream models(args["models"].as<std::string>());
      for (std::string spec; std::getline(models, spec, ',');) {
        if (spec.empty()) continue;
        time_model(spec, args["steps"].as<int>(), args["warmup"].as<int>(), true, group);
        if (args.count("nosync") && group->size() > 1)
          time_model(spec, args["steps"].as<int>(), args["warmup"].as<int>(), false, group);
        if (args.count("zero")) time_model(spec, args["steps"].as<int>(), args["warmup"].as<int>(), true, group, true);
      }
      group.reset();
      distributed::destroy_process_group();
    }
    MPI_Finalize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_distributed: %s\n", e.what());
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  return 0;
}
