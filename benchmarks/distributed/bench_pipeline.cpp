// bench_pipeline: what pipeline parallelism costs on this machine, run under mpirun -np S (one
// stage per rank). The model is S equal blocks of Linear(width, width) + Tanh layers, a Linear head
// and a cross-entropy loss; each rank holds one block. For every schedule and micro-batch count it
// trains --steps steps and rank 0 prints one CSV line:
//   pipeline,schedule,stages,micro_batches,batch,width,step_ms,waiting_fraction,bound,max_in_flight,
//   compute_ms,idle_fraction
// (each the mean over ranks of the rank's median over the steps). waiting_fraction: the share of the
// step a rank spent blocked on a neighbour's message; idle_fraction: the share it did not compute
// (waiting, the final status exchange, communication), the measured bubble; bound: (S-1)/(M+S-1),
// the bubble of equal stages with free communication. With --reference, one rank also trains the whole model alone (a
// line "reference").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::shared_ptr<nn::Sequential> make_block(int64_t width, int64_t layers, bool head, uint64_t seed) {
  Generator gen(seed);
  auto block = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < layers; ++i) {
    block->push_back(std::make_shared<nn::Linear>(width, width, true, &gen));
    block->push_back(std::make_shared<nn::Tanh>());
  }
  if (head) block->push_back(std::make_shared<nn::Linear>(width, 10, true, &gen));
  return block;
}

Tensor loss_of(const std::vector<Tensor>& out, const std::vector<Tensor>& target, int64_t) {
  return cross_entropy(out[0], target[0]);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("bench_pipeline", "Pipeline-parallel training steps under mpirun, one stage per rank");
  cli.add_options()("batch", "rows per step", cxxopts::value<int64_t>()->default_value("256"))(
      "width", "Linear width", cxxopts::value<int64_t>()->default_value("512"))(
      "layers", "Linear layers per stage", cxxopts::value<int64_t>()->default_value("4"))(
      "micro-batches", "comma-separated counts", cxxopts::value<std::string>()->default_value("1,2,4,8"))(
      "steps", "timed steps per setting", cxxopts::value<int>()->default_value("20"))(
      "reference", "also time the whole model on one rank")(
      "pingpong", "first time send/recv round trips between ranks 0 and 1 (the per-message cost)")("help", "this help");
  auto args = cli.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  const int64_t batch = args["batch"].as<int64_t>(), width = args["width"].as<int64_t>(),
                layers = args["layers"].as<int64_t>();
  const int steps = args["steps"].as<int>();
  std::vector<int64_t> micro;
  std::string list = args["micro-batches"].as<std::string>();
  for (size_t start = 0; start < list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    micro.push_back(std::stoll(list.substr(start, end - start)));
    start = end + 1;
  }
  auto group = distributed::init_process_group();
  const int rank = group->rank(), stages = group->size();
  auto stage = make_block(width, layers, rank == stages - 1, 100 + uint64_t(rank));
  optim::Adam opt(stage->parameters(), optim::AdamOptions(1e-4));
  Generator data(7);
  Tensor x = randn({batch, width}, kFloat32, &data), y = randint(0, 10, {batch}, kInt64, &data);
  if (args.count("pingpong") && stages >= 2 && rank < 2) {
    // A message's one-way time: half a round trip, at a small and an activation-sized tensor.
    if (rank == 0) std::printf("# pingpong,bytes,one_way_us (median of 200 round trips)\n");
    for (int64_t n : {int64_t(16), batch * width / 4}) {
      Tensor t = zeros({n});
      std::vector<double> us;
      for (int i = 0; i < 210; ++i) {
        auto start = std::chrono::steady_clock::now();
        if (rank == 0) {
          group->send(t, 1);
          group->recv(t, 1);
        } else {
          group->recv(t, 0);
          group->send(t, 0);
        }
        if (i >= 10)
          us.push_back(0.5 *
                       std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      if (rank == 0) std::printf("pingpong,%lld,%.1f\n", (long long)(n * 4), median(us));
    }
  }
  group->barrier();
  if (rank == 0)
    std::printf(
        "# "
        "pipeline,schedule,stages,micro_batches,batch,width,step_ms,waiting_fraction,bound,max_in_flight,compute_ms,"
        "idle_fraction\n");
  for (auto schedule : {distributed::PipelineSchedule::OneFOneB, distributed::PipelineSchedule::GPipe}) {
    for (int64_t m : micro) {
      distributed::Pipeline pipe(stage, group, distributed::PipelineOptions().micro_batches(m).schedule(schedule));
      pipe.set_loss(loss_of);
      std::vector<double> step_ms, waiting, compute_ms, idle;
      for (int s = 0; s < steps + 2; ++s) {
        pipe.step(x, y);
        opt.step();
        opt.zero_grad();
        if (s < 2) continue;  // warm-up
        step_ms.push_back(pipe.last_step_times().total * 1e3);
        waiting.push_back(pipe.last_step_times().waiting / pipe.last_step_times().total);
        compute_ms.push_back(pipe.last_step_times().compute * 1e3);
        idle.push_back(1 - pipe.last_step_times().compute / pipe.last_step_times().total);
      }
      Tensor summary = tensor<double>({median(step_ms), median(waiting), median(compute_ms), median(idle)}, {4});
      group->all_reduce(summary, distributed::ReduceOp::Avg);
      if (rank == 0)
        std::printf("pipeline,%s,%d,%lld,%lld,%lld,%.3f,%.3f,%.3f,%lld,%.3f,%.3f\n",
                    distributed::pipeline_schedule_name(schedule), stages, (long long)m, (long long)batch,
                    (long long)width, summary.data<double>()[0], summary.data<double>()[1],
                    distributed::pipeline_bubble_bound(stages, m), (long long)pipe.last_step_times().max_in_flight,
                    summary.data<double>()[2], summary.data<double>()[3]);
      std::fflush(stdout);
    }
  }
  if (args.count("reference") && rank == 0) {
    // The whole model (every rank's block) in one process: what the pipeline divides.
    auto whole = std::make_shared<nn::Sequential>();
    std::vector<std::shared_ptr<nn::Sequential>> blocks;
    for (int r = 0; r < stages; ++r) blocks.push_back(make_block(width, layers, r == stages - 1, 100 + uint64_t(r)));
    for (auto& b : blocks)
      for (size_t i = 0; i < b->size(); ++i) whole->push_back((*b)[i]);
    optim::Adam ref_opt(whole->parameters(), optim::AdamOptions(1e-4));
    std::vector<double> step_ms;
    for (int s = 0; s < steps + 2; ++s) {
      auto start = std::chrono::steady_clock::now();
      cross_entropy(whole->forward(x), y).backward();
      ref_opt.step();
      ref_opt.zero_grad();
      if (s >= 2)
        step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::printf("reference,one process,%d,1,%lld,%lld,%.3f,0,0,1,%.3f,0\n", stages, (long long)batch, (long long)width,
                median(step_ms), median(step_ms));
  }
  group->barrier();
  distributed::destroy_process_group();
  return 0;
}
