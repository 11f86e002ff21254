// The training loop shared by mlp_fashion and lstm_fashion: Adam on Fashion-MNIST with per-epoch
// train loss, test accuracy and images/s (also logged with --metrics / --tensorboard, with the
// test loss), a progress bar on a terminal, and safetensors checkpoints (model, optimiser state
// and epoch) that a later run can --resume from. With --distributed, DDP over the MPI job: each
// rank trains on its DistributedSampler shard and evaluates a slice of the test set; the printed
// and logged numbers are over all ranks, and rank 0 alone writes them and the checkpoints.
#pragma once

#include <cstdio>
#include <cxxopts.hpp>
#include <limits>
#include <map>
#include <string>

#include "amp_cli.h"
#include "cuda_graph_cli.h"
#include "distributed_cli.h"
#include "example_util.h"
#include "metrics_cli.h"
#include "output_paths.h"
#include "tapegrad/distributed/zero.h"

namespace examples {

inline void add_training_options(cxxopts::Options& cli, const char* default_epochs, const char* default_lr) {
  cli.add_options()("epochs", "training epochs (>= 1)", cxxopts::value<std::string>()->default_value(default_epochs))(
      "batch-size", "examples per step (>= 1)", cxxopts::value<std::string>()->default_value("64"))(
      "lr", "Adam learning rate (> 0)", cxxopts::value<std::string>()->default_value(default_lr))(
      "seed", "random seed (initialisation and shuffling)", cxxopts::value<std::string>()->default_value("0"))(
      "device", "cpu, cuda, cuda:N or auto", cxxopts::value<std::string>()->default_value("auto"))(
      "threads", "CPU threads (0: OpenMP's default)", cxxopts::value<std::string>()->default_value("0"))(
      "data", "Fashion-MNIST folder",
      cxxopts::value<std::string>()->default_value("/usr/share/datasets/fashion-mnist"))(
      "limit", "use only the first N training images (0: all)", cxxopts::value<std::string>()->default_value("0"))(
      "checkpoint", "save a safetensors checkpoint here after each epoch",
      cxxopts::value<std::string>()->default_value(""))("resume", "continue from this checkpoint",
                                                        cxxopts::value<std::string>()->default_value(""))(
      "zero",
      "with --distributed: shard Adam's state across the processes (ZeroRedundancyOptimizer, ZeRO stage 1); the "
      "training is the same, each process holds about 1/N of the moments")(
      "fresh-optimizer",
      "with --resume: accept a checkpoint without optimiser state and restart Adam (the run is "
      "then not an exact continuation)")(
      "summary", "print the model's summary (layers, output shapes, parameters, memory) first")("h,help", "this help");
  add_metrics_options(cli);
  add_distributed_options(cli);
  add_amp_options(cli);
  add_cuda_graph_options(cli);
}

// The training options, read and range-checked once.
struct TrainingOptions {
  int64_t epochs, batch_size, limit;
  double lr;
  uint64_t seed;
  std::string resume, checkpoint;
  bool fresh_optimizer;
  bool zero;  // Adam's state sharded across the ranks (ZeroRedundancyOptimizer)
};

inline TrainingOptions read_training_options(const cxxopts::ParseResult& args) {
  TrainingOptions o;
  o.epochs = int_flag(args, "epochs", 1, 1'000'000);
  o.batch_size = int_flag(args, "batch-size", 1, int64_t{1} << 31);
  o.limit = int_flag(args, "limit", 0, std::numeric_limits<int64_t>::max());
  o.lr = real_flag(args, "lr", 0.0, 1e6, true);
  o.seed = uint64_flag(args, "seed");
  o.resume = args["resume"].as<std::string>();
  o.checkpoint = args["checkpoint"].as<std::string>();
  o.fresh_optimizer = args.count("fresh-optimizer") > 0;
  if (o.fresh_optimizer && o.resume.empty()) throw UsageError("--fresh-optimizer only applies with --resume");
  o.zero = args.count("zero") > 0;
  if (o.zero && !args.count("distributed"))
    throw UsageError("--zero shards the optimiser across processes: it needs --distributed");
  return o;
}

// Refuses outputs that would overwrite an input or each other (output_paths.h): the data set's
// four files and --resume are inputs. Called before any file is opened.
inline void check_fashion_paths(const cxxopts::ParseResult& args) {
  const std::string data = args["data"].as<std::string>();
  std::vector<PathFlag> inputs{{"resume", args["resume"].as<std::string>()}};
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"})
    inputs.push_back({"data", data + "/" + name});
  std::vector<PathFlag> outputs = logging_outputs(args);
  outputs.push_back({"checkpoint", args["checkpoint"].as<std::string>()});
  check_output_paths(inputs, outputs, {{"checkpoint", "resume"}});
}

// The last completed epoch recorded in a checkpoint's metadata: a whole number >= 1.
inline int64_t checkpoint_epoch(const std::string& path) {
  std::map<std::string, std::string> metadata;
  try {
    metadata = tapegrad::load_safetensors_metadata(path);
  } catch (const tapegrad::Error& e) {
    throw tapegrad::Error(std::string("--resume: ") + e.what());
  }
  auto it = metadata.find("epoch");
  if (it == metadata.end())
    throw tapegrad::Error("--resume: " + path + " has no 'epoch' in its metadata (not a checkpoint of these examples)");
  try {
    return parse_int("resume", it->second, 1, 1'000'000);
  } catch (const UsageError&) {
    throw tapegrad::Error("--resume: " + path + " records epoch '" + it->second +
                          "', expected a whole number from 1 to 1000000");
  }
}

struct Evaluation {
  double accuracy, loss;  // loss: mean cross-entropy
};

// Under InferenceMode; with `graphed` enabled (--cuda-graph) each full chunk's forward replays one
// captured graph.
inline Evaluation evaluate(tapegrad::nn::UnaryModule& model, const tapegrad::Tensor& images,
                           const tapegrad::Tensor& labels, tapegrad::Device device, GraphedForward* graphed = nullptr) {
  using namespace tapegrad;
  InferenceMode inference;
  const bool was_training = model.is_training();
  model.eval();
  int64_t correct = 0;
  double loss_sum = 0;
  const int64_t n = images.size(0), chunk = 1000;
  for (int64_t start = 0; start < n; start += chunk) {
    int64_t len = std::min(chunk, n - start);
    const Tensor input = images.narrow(0, start, len).to(device);
    Tensor logits = graphed != nullptr ? graphed->run(input, [&](const Tensor& x) { return model.forward(x); })
                                       : model.forward(input);
    correct += sum(eq(argmax(logits, 1).cpu(), labels.narrow(0, start, len))).item<int64_t>();
    loss_sum += cross_entropy(logits, labels.narrow(0, start, len).to(device)).item() * static_cast<double>(len);
  }
  model.train(was_training);
  return {static_cast<double>(correct) / static_cast<double>(n), loss_sum / static_cast<double>(n)};
}

// Trains `model` with the options in `args`; returns the process exit code. Throws UsageError for
// a bad flag and tapegrad::Error for a bad checkpoint or data set, or a loss that is not finite
// (before saving that epoch's checkpoint, so the last good one stays).
inline int train_fashion(const char* program, tapegrad::nn::UnaryModule& model, const cxxopts::ParseResult& args) {
  using namespace tapegrad;
  const TrainingOptions options = read_training_options(args);
  const DistributedRun run(args);
  const Device device = run.pick_device(args["device"].as<std::string>());
  AmpSession amp(args, device);  // training and evaluation under --amp
  GraphedStep graphed(args, device);
  GraphedForward graphed_evaluation(graphed.enabled());
  std::unique_ptr<observe::MetricsLogger> metrics = run.open_metrics(args);
  model.to(device);
  FashionMNIST train_set(args["data"].as<std::string>(), true), test_set(args["data"].as<std::string>(), false);
  Tensor train_images = train_set.images(), train_labels = train_set.labels();
  if (options.limit > 0 && options.limit < train_images.size(0)) {
    train_images = train_images.narrow(0, 0, options.limit);
    train_labels = train_labels.narrow(0, 0, options.limit);
  }
  if (train_images.size(0) == 0) throw Error("the training set in " + args["data"].as<std::string>() + " is empty");
  if (test_set.images().size(0) == 0) throw Error("the test set in " + args["data"].as<std::string>() + " is empty");
  TensorDataset dataset(train_images, train_labels);
  DataLoaderOptions loader_options;
  loader_options.batch_size = options.batch_size;
  loader_options.shuffle = true;
  loader_options.seed = options.seed;
  const std::unique_ptr<BatchSampler> shard = run.shard(dataset.size(), options.batch_size, options.seed);
  DataLoader loader = shard ? DataLoader(dataset, *shard) : DataLoader(dataset, loader_options);

  if (options.zero && graphed.enabled())
    throw UsageError("--zero with --cuda-graph: a sharded optimiser's step broadcasts, which a graph cannot capture");
  // With --zero every rank holds the Adam state of its shard only; the training is the same
  // (docs/distributed.md, "Sharded optimiser").
  std::unique_ptr<optim::Optimizer> optimizer;
  distributed::ZeroRedundancyOptimizer* zero = nullptr;
  if (options.zero) {
    auto sharded = std::make_unique<distributed::ZeroRedundancyOptimizer>(
        model.parameters(), run.group(), [&](std::vector<optim::ParamGroup> groups) {
          return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions(options.lr));
        });
    zero = sharded.get();
    optimizer = std::move(sharded);
  } else {
    optimizer =
        std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions(options.lr).capturable(graphed.enabled()));
  }
  optim::Optimizer& opt = *optimizer;
  nn::CrossEntropyLoss loss_fn;
  int64_t first_epoch = 1;
  if (!options.resume.empty()) {
    const int64_t saved_epoch = checkpoint_epoch(options.resume);
    StateDict model_state, optim_state;
    for (auto& [name, t] : load_safetensors(options.resume)) {
      if (name.rfind("model.", 0) == 0)
        model_state.emplace_back(name.substr(6), t);
      else if (name.rfind("optim.", 0) == 0)
        optim_state.emplace_back(name.substr(6), t);
      else
        throw Error("--resume: " + options.resume + " has an unexpected tensor '" + name + "'");
    }
    model.load_state_dict(model_state);
    if (optim_state.empty() && !options.fresh_optimizer)
      throw Error("--resume: " + options.resume +
                  " has no optimiser state, so the run would not continue exactly; pass --fresh-optimizer to "
                  "restart Adam from it anyway");
    opt.load_state_dict(optim_state);
    // The state dict carries the saved learning rate (as PyTorch's does); the command line's --lr
    // wins, so a run can be resumed at another rate. With the same --lr it continues exactly.
    opt.set_lr(options.lr);
    first_epoch = saved_epoch + 1;
    std::printf("resumed from %s at epoch %lld%s\n", options.resume.c_str(), static_cast<long long>(first_epoch),
                optim_state.empty() ? " with a fresh optimiser (not an exact continuation)" : "");
  }
  if (args.count("summary")) {
    nn::SummaryOptions summary_options;
    summary_options.optimizer_state_bytes_per_element = 8;  // Adam's two float32 moments
    const int64_t batch = std::min<int64_t>(options.batch_size, train_images.size(0));
    std::printf("%s", nn::summary(model, train_images.narrow(0, 0, batch).to(device), summary_options).table.c_str());
  }
  // After --resume, so that DDP's broadcast of rank 0's weights is a formality.
  const auto ddp = run.wrap(model);
  std::printf("%s on %s%s%s%s, %d threads, %lld training images, batch %lld\n", program, device.str().c_str(),
              run.describe().c_str(), amp.describe().c_str(), graphed.describe().c_str(), get_num_threads(),
              static_cast<long long>(train_images.size(0)),
              static_cast<long long>(loader_options.batch_size * run.size()));

  int64_t global_step = (first_epoch - 1) * static_cast<int64_t>(loader.size());  // optimiser steps so far
  for (int64_t epoch = first_epoch; epoch <= options.epochs; ++epoch) {
    loader.set_epoch(epoch);
    Progress progress(loader.size());
    Stopwatch clock;
    double loss_sum = 0;
    int64_t steps = 0, images = 0;
    for (const Example& batch : loader) {
      const Tensor input = batch.input.to(device);
      Tensor loss = graphed.run(input, batch.target.to(device), [&](const Tensor& x, const Tensor& y) {
        Tensor l = loss_fn(ddp ? ddp->forward(x) : model.forward(x), y);
        opt.zero_grad();
        amp.backward_and_step(l, opt);
        return l;
      });
      const double value = loss.item();
      // Over all ranks, so that every rank stops at the same step instead of leaving the others waiting.
      check_finite_loss(run.enabled() ? run.sum(value) : value,
                        "epoch " + std::to_string(epoch) + " step " + std::to_string(steps + 1));
      loss_sum += value;
      images += batch.input.size(0);
      progress.update(++steps, images);
    }
    progress.finish();
    const double seconds = run.max(clock.seconds());  // the slowest rank sets the pace
    const auto [first, end] = run.slice(test_set.images().size(0));
    Evaluation test{0, 0};
    if (end > first)
      test = evaluate(model, test_set.images().narrow(0, first, end - first),
                      test_set.labels().narrow(0, first, end - first), device, &graphed_evaluation);
    // Sums over the ranks: the test slices weighted by their size, every rank's steps alike.
    const std::vector<double> totals = run.sum({test.accuracy * double(end - first), test.loss * double(end - first),
                                                loss_sum, double(steps), double(images)});
    const double n_test = static_cast<double>(test_set.images().size(0));
    test = {totals[0] / n_test, totals[1] / n_test};
    const double train_loss = totals[2] / totals[3], rate = totals[4] / seconds;
    std::printf("epoch %2lld  train loss %.4f  test accuracy %.4f  %.0f img/s  %.1f s\n", static_cast<long long>(epoch),
                train_loss, test.accuracy, rate, seconds);
    if (zero != nullptr && epoch == first_epoch) {  // Adam makes its state in the first step
      const double local = static_cast<double>(zero->local_state_bytes());
      std::printf("optimiser state: %.0f bytes on rank 0, %.0f on all %d ranks (ZeRO stage 1)\n", local,
                  run.sum(std::vector<double>{local})[0], run.size());
    }
    std::fflush(stdout);
    global_step += steps;
    metrics->log(global_step, {{"epoch", static_cast<double>(epoch)},
                               {"train/loss", train_loss},
                               {"test/loss", test.loss},
                               {"test/accuracy", test.accuracy},
                               {"lr", opt.lr()},
                               {"throughput/images_per_s", rate}});
    if (!options.checkpoint.empty() && zero != nullptr) zero->consolidate_state_dict(0);  // every rank
    if (!options.checkpoint.empty() && run.is_main()) {
      StateDict state;
      for (auto& [name, t] : model.state_dict()) state.emplace_back("model." + name, t);
      for (auto& [name, t] : opt.state_dict()) state.emplace_back("optim." + name, t);
      save_safetensors(options.checkpoint, state, {{"epoch", std::to_string(epoch)}});
    }
  }
  return 0;
}

}  // namespace examples
