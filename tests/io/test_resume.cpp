// Resuming from a checkpoint reproduces an uninterrupted run exactly: model, optimiser state,
// scheduler, data-loader position (epoch and batch) and the random-number state (dropout) are all
// saved to one safetensors file mid-epoch, loaded into freshly built objects, and training goes on
// with bit-identical losses. CPU, fixed seed and thread count.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "support/thread_count.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

constexpr int64_t kBatch = 16;

TensorDataset make_dataset() {
  Generator g(5);
  Tensor x = randn({200, 6}, TensorOptions(), &g);
  Tensor y = argmax(matmul(x, randn({6, 3}, TensorOptions(), &g)), 1);
  return TensorDataset(x, y);
}

// Everything a run needs, built the same way each time; only the checkpoint differs.
struct TrainingRun {
  Generator init{17}, dropout_rng{99};
  nn::Sequential model;
  optim::Adam opt;
  optim::StepLR sched;
  TensorDataset data = make_dataset();
  DataLoader loader;
  nn::CrossEntropyLoss loss_fn;
  int64_t epoch = 0, batch = 0;  // the next batch to train on

  TrainingRun()
      : model({std::make_shared<nn::Linear>(6, 32, true, &init), std::make_shared<nn::ReLU>(),
               std::make_shared<nn::Dropout>(0.2, &dropout_rng), std::make_shared<nn::Linear>(32, 3, true, &init)}),
        opt(model.parameters(), optim::AdamOptions(1e-2)),
        sched(opt, /*step_size=*/1, /*gamma=*/0.5),
        loader(data, DataLoaderOptions{kBatch, /*shuffle=*/true, /*seed=*/3, /*drop_last=*/false}) {}

  // Trains until `steps` more batches are done; steps across epoch ends, stepping the scheduler.
  std::vector<double> train(int64_t steps) {
    std::vector<double> losses;
    while (steps > 0) {
      loader.set_epoch(epoch);
      int64_t index = 0;
      for (const Example& b : loader) {
        if (index++ < batch) continue;  // the position within the epoch a checkpoint resumed at
        Tensor loss = loss_fn(model.forward(b.input), b.target);
        opt.zero_grad();
        loss.backward();
        opt.step();
        losses.push_back(loss.item());
        ++batch;
        if (--steps == 0) break;
      }
      if (steps == 0 && batch < loader.size()) break;
      ++epoch;
      batch = 0;
      sched.step();
    }
    return losses;
  }

  void save(const std::string& path) const {
    StateDict state;
    for (auto& [name, t] : model.state_dict()) state.emplace_back("model." + name, t);
    for (auto& [name, t] : opt.state_dict()) state.emplace_back("optim." + name, t);
    save_safetensors(path, state,
                     {{"epoch", std::to_string(epoch)},
                      {"batch", std::to_string(batch)},
                      {"scheduler.last_epoch", std::to_string(sched.last_epoch())},
                      {"dropout_rng.seed", std::to_string(dropout_rng.seed())},
                      {"dropout_rng.offset", std::to_string(dropout_rng.offset())}});
  }

  void load(const std::string& path) {
    StateDict model_state, optim_state;
    for (auto& [name, t] : load_safetensors(path)) {
      if (name.rfind("model.", 0) == 0) model_state.emplace_back(name.substr(6), t);
      if (name.rfind("optim.", 0) == 0) optim_state.emplace_back(name.substr(6), t);
    }
    model.load_state_dict(model_state);
    opt.load_state_dict(optim_state);
    auto meta = load_safetensors_metadata(path);
    epoch = std::stoll(meta.at("epoch"));
    batch = std::stoll(meta.at("batch"));
    sched.set_epoch(std::stoll(meta.at("scheduler.last_epoch")));
    dropout_rng.set_state(std::stoull(meta.at("dropout_rng.seed")), std::stoull(meta.at("dropout_rng.offset")));
  }
};

TEST(Resume, MidEpochCheckpointContinuesWithIdenticalLosses) {
  tapegrad::testing::ThreadCount two_threads(2);
  const int64_t first = 20, second = 25;  // 13 batches per epoch: the checkpoint falls mid-epoch 1
  TrainingRun uninterrupted;
  std::vector<double> expected = uninterrupted.train(first + second);

  const std::string path = ::testing::TempDir() + "tapegrad_resume.safetensors";
  std::vector<double> before, after;
  {
    TrainingRun part1;
    before = part1.train(first);
    ASSERT_GT(part1.batch, 0);
    ASSERT_LT(part1.batch, part1.loader.size());
    part1.save(path);
  }
  {
    TrainingRun part2;  // fresh objects, different in-memory state until load()
    part2.load(path);
    after = part2.train(second);
  }
  std::remove(path.c_str());
  std::vector<double> resumed = before;
  resumed.insert(resumed.end(), after.begin(), after.end());
  ASSERT_EQ(resumed.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(resumed[i], expected[i]) << "step " << i;
}

TEST(Resume, GeneratorStateRoundTrips) {
  Generator a(42);
  (void)rand({10}, TensorOptions(), &a);
  Generator b(7);
  b.set_state(a.seed(), a.offset());
  EXPECT_EQ(rand({5}, TensorOptions(), &a).tolist<float>(), rand({5}, TensorOptions(), &b).tolist<float>());
}

}  // namespace
