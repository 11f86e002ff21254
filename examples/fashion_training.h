// The training loop shared by mlp_fashion and lstm_fashion: Adam on Fashion-MNIST with per-epoch
// train loss, test accuracy and images/s, a progress bar on a terminal, and safetensors
// checkpoints (model, optimiser state and epoch) that a later run can --resume from.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include <cxxopts.hpp>

#include "example_util.h"

namespace examples {

inline void add_training_options(cxxopts::Options& cli, const char* default_epochs, const char* default_lr) {
  cli.add_options()("epochs", "training epochs", cxxopts::value<int>()->default_value(default_epochs))(
      "batch-size", "examples per step", cxxopts::value<int64_t>()->default_value("64"))(
      "lr", "Adam learning rate", cxxopts::value<double>()->default_value(default_lr))(
      "seed", "random seed (initialisation and shuffling)", cxxopts::value<uint64_t>()->default_value("0"))(
      "device", "cpu, cuda, cuda:N or auto", cxxopts::value<std::string>()->default_value("auto"))(
      "threads", "CPU threads (0: OpenMP's default)", cxxopts::value<int>()->default_value("0"))(
      "data", "Fashion-MNIST folder", cxxopts::value<std::string>()->default_value("/usr/share/datasets/fashion-mnist"))(
      "limit", "use only the first N training images (0: all)", cxxopts::value<int64_t>()->default_value("0"))(
      "checkpoint", "save a safetensors checkpoint here after each epoch", cxxopts::value<std::string>()->default_value(""))(
      "resume", "continue from this checkpoint", cxxopts::value<std::string>()->default_value(""))("h,help", "this help");
}

// Prints "\r[=====>    ] 123/938 1234 img/s ETA 12s" on a terminal; nothing otherwise.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), tty_(isatty(fileno(stdout))) {}
  void update(int64_t done, int64_t images) {
    if (!tty_ || (done % 10 != 0 && done != total_)) return;
    double elapsed = clock_.seconds(), rate = images / std::max(elapsed, 1e-9);
    double eta = done ? elapsed * (total_ - done) / done : 0;
    int filled = static_cast<int>(30 * done / std::max<int64_t>(total_, 1));
    std::printf("\r[%s%s] %lld/%lld %6.0f img/s ETA %4.0fs", std::string(filled, '=').c_str(),
                std::string(30 - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total_), rate,
                eta);
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\r%s\r", std::string(80, ' ').c_str());
  }

 private:
  int64_t total_;
  bool tty_;
  Stopwatch clock_;
};

inline double evaluate(tapegrad::nn::UnaryModule& model, const tapegrad::Tensor& images, const tapegrad::Tensor& labels,
                       tapegrad::Device device) {
  using namespace tapegrad;
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  const int64_t n = images.size(0), chunk = 1000;
  for (int64_t start = 0; start < n; start += chunk) {
    int64_t len = std::min(chunk, n - start);
    Tensor logits = model.forward(images.narrow(0, start, len).to(device));
    correct += sum(eq(argmax(logits, 1).cpu(), labels.narrow(0, start, len))).item<int64_t>();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

// Trains `model` with the options in `args`; returns the process exit code.
inline int train_fashion(const char* program, tapegrad::nn::UnaryModule& model, const cxxopts::ParseResult& args) {
  using namespace tapegrad;
  const Device device = pick_device(args["device"].as<std::string>());
  model.to(device);
  FashionMNIST train_set(args["data"].as<std::string>(), true), test_set(args["data"].as<std::string>(), false);
  Tensor train_images = train_set.images(), train_labels = train_set.labels();
  if (int64_t limit = args["limit"].as<int64_t>(); limit > 0 && limit < train_images.size(0)) {
    train_images = train_images.narrow(0, 0, limit);
    train_labels = train_labels.narrow(0, 0, limit);
  }
  TensorDataset dataset(train_images, train_labels);
  DataLoaderOptions loader_options;
  loader_options.batch_size = args["batch-size"].as<int64_t>();
  loader_options.shuffle = true;
  loader_options.seed = args["seed"].as<uint64_t>();
  DataLoader loader(dataset, loader_options);

  optim::Adam opt(model.parameters(), optim::AdamOptions(args["lr"].as<double>()));
  nn::CrossEntropyLoss loss_fn;
  int first_epoch = 1;
  if (const std::string resume = args["resume"].as<std::string>(); !resume.empty()) {
    StateDict model_state, optim_state;
    for (auto& [name, t] : load_safetensors(resume)) {
      if (name.rfind("model.", 0) == 0) model_state.emplace_back(name.substr(6), t);
      if (name.rfind("optim.", 0) == 0) optim_state.emplace_back(name.substr(6), t);
    }
    model.load_state_dict(model_state);
    opt.load_state_dict(optim_state);
    first_epoch = std::stoi(load_safetensors_metadata(resume).at("epoch")) + 1;
    std::printf("resumed from %s at epoch %d\n", resume.c_str(), first_epoch);
  }
  std::printf("%s on %s, %d threads, %lld training images, batch %lld\n", program, device.str().c_str(),
              get_num_threads(), static_cast<long long>(train_images.size(0)),
              static_cast<long long>(loader_options.batch_size));

  const int epochs = args["epochs"].as<int>();
  for (int epoch = first_epoch; epoch <= epochs; ++epoch) {
    loader.set_epoch(epoch);
    Progress progress(loader.size());
    Stopwatch clock;
    double loss_sum = 0;
    int64_t steps = 0, images = 0;
    for (const Example& batch : loader) {
      Tensor loss = loss_fn(model.forward(batch.input.to(device)), batch.target.to(device));
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item();
      images += batch.input.size(0);
      progress.update(++steps, images);
    }
    progress.finish();
    double seconds = clock.seconds();
    double accuracy = evaluate(model, test_set.images(), test_set.labels(), device);
    std::printf("epoch %2d  train loss %.4f  test accuracy %.4f  %.0f img/s  %.1f s\n", epoch, loss_sum / steps,
                accuracy, images / seconds, seconds);
    std::fflush(stdout);
    if (const std::string path = args["checkpoint"].as<std::string>(); !path.empty()) {
      StateDict state;
      for (auto& [name, t] : model.state_dict()) state.emplace_back("model." + name, t);
      for (auto& [name, t] : opt.state_dict()) state.emplace_back("optim." + name, t);
      save_safetensors(path, state, {{"epoch", std::to_string(epoch)}});
    }
  }
  return 0;
}

}  // namespace examples
