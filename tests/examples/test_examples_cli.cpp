// The example programs as a user runs them: every flag is validated with a message naming it,
// broken checkpoints and data sets are clear errors, and a loss that stops being finite ends the
// run with an error while the last good checkpoint stays as it was. Each case runs the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/idx_writer.h"
#include "support/tfrecord_reader.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status;          // the exit status, or -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

class ExamplesCli : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef TAPEGRAD_EXAMPLES_DIR
    GTEST_SKIP() << "the examples are not built (TAPEGRAD_BUILD_EXAMPLES=OFF)";
#else
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("tapegrad_cli_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
#endif
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Outcome run(const std::string& program, const std::string& arguments) const {
#ifdef TAPEGRAD_EXAMPLES_DIR
    const std::string command =
        std::string(TAPEGRAD_EXAMPLES_DIR) + "/" + program + " --threads 1 " + arguments + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return {-2, "popen failed"};
    std::string output;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
    const int status = ::pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
#else
    (void)program, (void)arguments;
    return {-2, ""};
#endif
  }

  // A usage error: exit status 2 and a message naming `flag`.
  void expect_usage_error(const std::string& program, const std::string& arguments, const std::string& fragment) const {
    Outcome r = run(program, arguments);
    EXPECT_EQ(r.status, 2) << program << " " << arguments << ":\n" << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << program << " " << arguments << ":\n" << r.output;
  }
  // A run that fails with status 1 and says `fragment`.
  void expect_failure(const std::string& program, const std::string& arguments, const std::string& fragment) const {
    Outcome r = run(program, arguments);
    EXPECT_EQ(r.status, 1) << program << " " << arguments << ":\n" << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << program << " " << arguments << ":\n" << r.output;
  }

  std::string data() const {
    return (dir_ / "data").string();
  }
  std::string path(const std::string& name) const {
    return (dir_ / name).string();
  }
  // mlp_fashion on the fake data set, small and quick.
  std::string fashion(const std::string& arguments) const {
    return "--device cpu --hidden 16 --batch-size 8 --data " + data() + " " + arguments;
  }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Issue 16, item 7.
TEST_F(ExamplesCli, TrainDemoValidatesEveryFlag) {
  expect_usage_error("train_demo", "--steps abc", "--steps: 'abc' is not an integer");
  expect_usage_error("train_demo", "--steps 2x", "--steps");
  expect_usage_error("train_demo", "--steps -3", "--steps: -3 is out of range");
  expect_usage_error("train_demo", "--steps 0", "--steps: 0 is out of range");  // was 'inf ms/step'
  expect_usage_error("train_demo", "--bogus 1", "bogus");
  expect_usage_error("train_demo", "stray", "unexpected argument 'stray'");
  expect_usage_error("train_demo", "--threads -1", "--threads");
  Outcome ok = run("train_demo", "--steps 2");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("2 steps in"), std::string::npos) << ok.output;
}

TEST_F(ExamplesCli, MlpSeedValidatesEveryFlag) {
  expect_usage_error("mlp_seed", "--lr 1e-3x", "--lr: '1e-3x' is not a number");
  expect_usage_error("mlp_seed", "--lr -1", "--lr");
  expect_usage_error("mlp_seed", "--lr nan", "--lr");
  expect_usage_error("mlp_seed", "--batches -5", "--batches");
  expect_usage_error("mlp_seed", "--batches 0", "--batches");
  expect_usage_error("mlp_seed", "--batch-size 0", "--batch-size");
  expect_usage_error("mlp_seed", "--batch-size 4611686018427388", "--batch-size");  // was a heap overflow
  expect_usage_error("mlp_seed", "--seed -1", "--seed");
  expect_usage_error("mlp_seed", "--threads x", "--threads");
  expect_usage_error("mlp_seed", "--epochs 3", "epochs");  // not one of its flags
  expect_failure("mlp_seed", "--device tpu", "tpu");
}

TEST_F(ExamplesCli, FashionExamplesValidateEveryFlag) {
  for (const char* program : {"mlp_fashion", "lstm_fashion"}) {
    expect_usage_error(program, "--epochs -1", "--epochs");
    expect_usage_error(program, "--epochs abc", "--epochs");
    expect_usage_error(program, "--limit -5", "--limit");
    expect_usage_error(program, "--batch-size 0", "--batch-size");
    expect_usage_error(program, "--lr 1e-3x", "--lr");
    expect_usage_error(program, "--fresh-optimizer", "--fresh-optimizer only applies with --resume");
    expect_usage_error(program, "--hidden 0", "--hidden");
  }
  expect_usage_error("mlp_fashion", "--hidden 12,x", "--hidden: 'x'");
  expect_usage_error("mlp_fashion", "--hidden 12,,4", "--hidden");
}

// Issue 16, item 6.
TEST_F(ExamplesCli, ResumeRejectsBrokenCheckpoints) {
  testing::write_fashion_folder(data(), 32, 10);
  // `--resume <directory>` said "read failed at byte 0".
  expect_failure("mlp_fashion", fashion("--resume " + dir_.string()), "is a directory");
  expect_failure("mlp_fashion", fashion("--resume " + path("missing.safetensors")), "--resume");

  const std::string good = path("good.safetensors");
  Outcome first = run("mlp_fashion", fashion("--epochs 1 --checkpoint " + good));
  ASSERT_EQ(first.status, 0) << first.output;
  StateDict state = load_safetensors(good);

  auto with_epoch = [&](const std::string& name, const std::map<std::string, std::string>& metadata, StateDict s) {
    save_safetensors(path(name), s, metadata);
    return path(name);
  };
  expect_failure("mlp_fashion", fashion("--epochs 2 --resume " + with_epoch("no_epoch", {}, state)), "no 'epoch'");
  expect_failure("mlp_fashion", fashion("--epochs 2 --resume " + with_epoch("abc", {{"epoch", "abc"}}, state)),
                 "epoch 'abc'");
  expect_failure("mlp_fashion", fashion("--epochs 2 --resume " + with_epoch("neg", {{"epoch", "-2"}}, state)),
                 "epoch '-2'");

  StateDict bad_key = state;
  for (auto& [name, t] : bad_key)
    if (name == "optim.1.exp_avg") name = "optim.1x.exp_avg";
  expect_failure("mlp_fashion", fashion("--epochs 2 --resume " + with_epoch("bad_key", {{"epoch", "1"}}, bad_key)),
                 "1x.exp_avg");
  StateDict nan_step = state;
  for (auto& [name, t] : nan_step)
    if (name == "optim.0.step") t = full({}, std::nan(""));
  expect_failure("mlp_fashion", fashion("--epochs 2 --resume " + with_epoch("nan_step", {{"epoch", "1"}}, nan_step)),
                 "not a step count");

  // No optimiser state: refused unless asked, then said to be inexact.
  StateDict model_only;
  for (auto& [name, t] : state)
    if (name.rfind("model.", 0) == 0) model_only.emplace_back(name, t);
  const std::string fresh = with_epoch("model_only", {{"epoch", "1"}}, model_only);
  expect_failure("mlp_fashion", fashion("--epochs 2 --resume " + fresh), "--fresh-optimizer");
  Outcome resumed = run("mlp_fashion", fashion("--epochs 2 --fresh-optimizer --resume " + fresh));
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("not an exact continuation"), std::string::npos) << resumed.output;

  // A good checkpoint resumes at the next epoch.
  Outcome good_resume = run("mlp_fashion", fashion("--epochs 2 --resume " + good));
  EXPECT_EQ(good_resume.status, 0) << good_resume.output;
  EXPECT_NE(good_resume.output.find("at epoch 2"), std::string::npos) << good_resume.output;
}

TEST_F(ExamplesCli, EmptyDataSetIsAnError) {
  testing::write_fashion_folder(data(), 0, 10);
  expect_failure("mlp_fashion", fashion("--epochs 1"), "training set");  // was 'loss -nan' and status 0
  testing::write_fashion_folder(data(), 16, 0);
  expect_failure("mlp_fashion", fashion("--epochs 1"), "test set");
}

// NaN training replaced the last good checkpoint with the NaN model.
TEST_F(ExamplesCli, NonFiniteLossStopsAndKeepsTheGoodCheckpoint) {
  testing::write_fashion_folder(data(), 32, 10);
  const std::string ckpt = path("ckpt.safetensors");
  Outcome first = run("mlp_fashion", fashion("--epochs 1 --checkpoint " + ckpt));
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string good = read_bytes(ckpt);

  // Finite but enormous weights, resumed from another file: the forward pass overflows (inf - inf =
  // NaN). (Enormous pixels did this before; FashionMNIST now refuses pixels outside 0..255.)
  StateDict huge = load_safetensors(ckpt);
  for (auto& [name, t] : huge)
    if (name.rfind("model.", 0) == 0 && name.find("weight") != std::string::npos) t = full_like(t, 1e30);
  const std::string bad = path("huge.safetensors");
  save_safetensors(bad, huge, load_safetensors_metadata(ckpt));
  // (lstm_fashion shares this loop; its gates saturate instead of overflowing, so it is not run here.)
  Outcome r = run("mlp_fashion", fashion("--epochs 2 --checkpoint " + ckpt + " --resume " + bad));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("the loss became"), std::string::npos) << r.output;
  EXPECT_TRUE(read_bytes(ckpt) == good) << "the checkpoint changed";
}

// The records of a --metrics JSON Lines file.
std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// The one event file a --tensorboard directory holds, read back with its CRCs checked.
std::vector<testing::tfrecord::Event> read_tensorboard_dir(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  EXPECT_EQ(files.size(), 1u);
  if (files.empty()) return {};
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u) << files[0];
  return testing::tfrecord::read_events(files[0].string());
}

// The value of `tag` in an event, or NaN.
float event_value(const testing::tfrecord::Event& e, const std::string& tag) {
  for (const auto& [t, v] : e.values)
    if (t == tag) return v;
  return NAN;
}

TEST_F(ExamplesCli, MetricsAndTensorBoardFiles) {
  const std::string jsonl = path("logs/seed.jsonl"), csv = path("logs/seed.csv"), tb = path("tb/seed");
  Outcome r = run("mlp_seed", "--device cpu --batches 200 --batch-size 8 --metrics " + jsonl + " --metrics-csv " + csv +
                                  " --tensorboard " + tb);
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> records = read_jsonl(jsonl);
  ASSERT_EQ(records.size(), 2u);  // batches 100 and 200, as printed
  EXPECT_EQ(records[1]["step"], 200);
  for (const char* key : {"train/loss", "lr", "throughput/examples_per_s", "wall_time"})
    EXPECT_TRUE(records[1][key].is_number()) << key << " in " << records[1].dump();
  EXPECT_EQ(records[0]["lr"].get<double>(), 1e-3);
  // The printed loss is the logged one.
  char printed[64];
  std::snprintf(printed, sizeof printed, "batch   200  loss %.4f", records[1]["train/loss"].get<double>());
  EXPECT_NE(r.output.find(printed), std::string::npos) << printed << "\n" << r.output;
  std::ifstream csv_in(csv);
  std::string header;
  std::getline(csv_in, header);
  EXPECT_EQ(header, "step,wall_time,train/loss,lr,throughput/examples_per_s");
  std::vector<testing::tfrecord::Event> events = read_tensorboard_dir(tb);
  ASSERT_EQ(events.size(), 3u);  // file_version, then one per record
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[2].step, 200);
  EXPECT_EQ(event_value(events[2], "train/loss"), static_cast<float>(records[1]["train/loss"].get<double>()));

  // train_demo logs at its printed steps, --summary prints the table, and a bad path is an error.
  Outcome demo = run("train_demo", "--steps 100 --metrics " + path("demo.jsonl"));
  ASSERT_EQ(demo.status, 0) << demo.output;
  records = read_jsonl(path("demo.jsonl"));
  ASSERT_EQ(records.size(), 3u);  // steps 0, 50, 100
  EXPECT_TRUE(records[2]["train/accuracy"].is_number());
  Outcome summary = run("mlp_seed", "--device cpu --batches 1 --batch-size 4 --summary");
  ASSERT_EQ(summary.status, 0) << summary.output;
  EXPECT_NE(summary.output.find("Total params: 517,642"), std::string::npos) << summary.output;
  std::ofstream(path("plain")) << "x";
  expect_failure("mlp_seed", "--device cpu --batches 1 --tensorboard " + path("plain") + "/tb",
                 "cannot create the directory");
}

TEST_F(ExamplesCli, ProfileWritesATraceAndPrintsTheTable) {
  const std::string trace = path("profile/demo.json");
  fs::create_directories(path("profile"));
  Outcome r = run("train_demo", "--steps 3 --profile " + trace + " --profile-sort calls --profile-rows 5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("profile (sorted by calls):"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# of Calls"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu memory: peak"), std::string::npos) << r.output;
  std::ifstream in(trace);
  nlohmann::json parsed = nlohmann::json::parse(in);
  EXPECT_FALSE(parsed["traceEvents"].empty());
  expect_usage_error("train_demo", "--steps 1 --profile " + path("missing/dir/t.json"), "--profile: cannot open");
  expect_usage_error("train_demo", "--steps 1 --profile " + trace + " --profile-sort fast", "--profile-sort: 'fast'");
  expect_usage_error("train_demo", "--steps 1 --profile " + trace + " --profile-rows -1", "--profile-rows");
}

TEST_F(ExamplesCli, FashionMetricsPerEpoch) {
  testing::write_fashion_folder(data(), 32, 10);
  const std::string jsonl = path("fashion.jsonl"), tb = path("tb");
  Outcome r = run("lstm_fashion", fashion("--epochs 2 --summary --metrics " + jsonl + " --tensorboard " + tb));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("  LSTM (lstm)"), std::string::npos) << r.output;  // the summary sees the children
  std::vector<nlohmann::json> records = read_jsonl(jsonl);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["epoch"], 1);
  EXPECT_EQ(records[0]["step"], 4);  // 32 images in batches of 8
  EXPECT_EQ(records[1]["step"], 8);
  for (const char* key : {"train/loss", "test/loss", "test/accuracy", "lr", "throughput/images_per_s"})
    EXPECT_TRUE(records[1][key].is_number()) << key << " in " << records[1].dump();
  std::vector<testing::tfrecord::Event> events = read_tensorboard_dir(tb);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(event_value(events[1], "test/accuracy"), static_cast<float>(records[0]["test/accuracy"].get<double>()));
}

// char_lstm on a small generated corpus (fortune format: records between lines holding '%').
class CharLstmCli : public ExamplesCli {
 protected:
  void write_corpus(const std::string& folder, const std::vector<std::string>& sentences) const {
    fs::create_directories(folder);
    std::ofstream out(folder + "/tiny");
    for (int i = 0; i < 40; ++i) out << sentences[size_t(i) % sentences.size()] << " " << i << "\n%\n";
  }
  std::string corpus() const {
    const std::string folder = path("corpus");
    write_corpus(folder, {"The cat sat on the mat.", "A dog ran; the cat hid!", "Is it late? No, it is early."});
    return folder;
  }
  // 32 training and 8 validation records: 8 batches of 4 per epoch.
  std::string tiny(const std::string& data, const std::string& arguments) const {
    return "--device cpu --data " + data +
           " --valid-fraction 0.2 --embedding 8 --hidden 16 --layers 2 --batch-size 4 --bptt 8 --warmup 2 " + arguments;
  }
};

TEST_F(CharLstmCli, ValidatesEveryFlag) {
  expect_usage_error("char_lstm", "--bucketing maybe", "--bucketing: 'maybe' is not on or off");
  expect_usage_error("char_lstm", "--schedule linear", "--schedule: 'linear'");
  expect_usage_error("char_lstm", "--bptt 0", "--bptt");
  expect_usage_error("char_lstm", "--batch-size 0", "--batch-size");
  expect_usage_error("char_lstm", "--epochs 0", "--epochs");
  expect_usage_error("char_lstm", "--hidden 0", "--hidden");
  expect_usage_error("char_lstm", "--layers 0", "--layers");
  expect_usage_error("char_lstm", "--dropout 1", "--dropout");
  expect_usage_error("char_lstm", "--valid-fraction 1", "--valid-fraction");
  expect_usage_error("char_lstm", "--lr 0", "--lr");
  expect_usage_error("char_lstm", "--min-lr 0.1", "--min-lr");  // above --lr
  expect_usage_error("char_lstm", "--clip -1", "--clip");
  expect_usage_error("char_lstm", "--max-minutes -1", "--max-minutes");
  expect_usage_error("char_lstm", "--max-minutes 1x", "--max-minutes: '1x' is not a number");
  expect_usage_error("char_lstm", "--limit-records -5", "--limit-records");
  expect_usage_error("char_lstm", "--eval-every x", "--eval-every");
  expect_usage_error("char_lstm", "--sample 5", "--sample needs a model");
  expect_usage_error("char_lstm", "--sample -5", "--sample");
  expect_usage_error("char_lstm", "--prime abc", "--prime only applies with --sample");
  expect_usage_error("char_lstm", "--sample 5 --resume x --temperature 0", "--temperature");
  expect_usage_error("char_lstm", "stray", "unexpected argument 'stray'");
  expect_failure("char_lstm", "--device cpu --data " + path("missing"), "missing");
  expect_failure("char_lstm", "--device cpu --sample 5 --resume " + path("missing.safetensors"), "--resume");
}

TEST_F(CharLstmCli, TrainsCheckpointsResumesAndSamples) {
  const std::string data = corpus(), ckpt = path("ckpt.safetensors");
  Outcome first = run("char_lstm", tiny(data, "--epochs 2 --checkpoint " + ckpt));
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("32 train / 8 validation records"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("8 batches/epoch"), std::string::npos) << first.output;
  for (const char* line : {"epoch  1  train loss", "epoch  2  train loss", "bpc", "chars/s", "padding"})
    EXPECT_NE(first.output.find(line), std::string::npos) << line << "\n" << first.output;

  Outcome resumed = run("char_lstm", tiny(data, "--epochs 3 --checkpoint " + ckpt + " --resume " + ckpt));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + ckpt + " at epoch 3, batch 1"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("epoch  3  train loss"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("epoch  2  train loss"), std::string::npos) << resumed.output;
  Outcome limited = run("char_lstm", tiny(data, "--epochs 1 --limit-records 5"));
  EXPECT_EQ(limited.status, 0) << limited.output;
  EXPECT_NE(limited.output.find("5 train / 5 validation records"), std::string::npos) << limited.output;
  EXPECT_NE(limited.output.find("2 batches/epoch"), std::string::npos) << limited.output;

  Outcome done = run("char_lstm", tiny(data, "--epochs 3 --resume " + ckpt));
  EXPECT_EQ(done.status, 0) << done.output;
  EXPECT_NE(done.output.find("nothing to train"), std::string::npos) << done.output;

  Outcome sampled =
      run("char_lstm", "--device cpu --resume " + ckpt + " --sample 30 --prime 'The c' --temperature 0.5");
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_NE(sampled.output.find("--- greedy ---\nThe c"), std::string::npos) << sampled.output;
  EXPECT_NE(sampled.output.find("--- sampled, temperature 0.5 ---\nThe c"), std::string::npos) << sampled.output;

  // The checkpoint decides the architecture; a flag that disagrees, or other text, is refused.
  expect_usage_error("char_lstm", tiny(data, "--epochs 4 --resume " + ckpt + " --hidden 32"),
                     "--hidden 32 differs from the checkpoint's 16");
  const std::string other = path("other");
  write_corpus(other, {"zzz xyzzy QQQ 0123456789"});
  expect_failure("char_lstm", tiny(other, "--epochs 4 --resume " + ckpt), "another vocabulary");
  StateDict no_vocab;
  for (auto& [name, t] : load_safetensors(ckpt))
    if (name.rfind("vocab.", 0) != 0) no_vocab.emplace_back(name, t);
  save_safetensors(path("no_vocab.safetensors"), no_vocab, load_safetensors_metadata(ckpt));
  expect_failure("char_lstm", "--device cpu --sample 5 --resume " + path("no_vocab.safetensors"), "no entry 'vocab.");
  save_safetensors(path("plain.safetensors"), load_safetensors(ckpt));  // no metadata
  expect_failure("char_lstm", tiny(data, "--epochs 4 --resume " + path("plain.safetensors")), "no 'epoch'");
}

TEST_F(CharLstmCli, TimeLimitStopsCleanlyAndResumesMidEpoch) {
  const std::string data = corpus(), ckpt = path("ckpt.safetensors");
  // 1e-6 minutes: the budget is spent after the first batch.
  Outcome stopped = run("char_lstm", tiny(data, "--epochs 2 --max-minutes 1e-6 --checkpoint " + ckpt));
  ASSERT_EQ(stopped.status, 0) << stopped.output;
  EXPECT_NE(stopped.output.find("epoch  1 (partial)  train loss"), std::string::npos) << stopped.output;
  EXPECT_NE(stopped.output.find("at batch 1 of 8 in epoch 1; --resume continues"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("epoch  2"), std::string::npos) << stopped.output;
  EXPECT_EQ(load_safetensors_metadata(ckpt).at("batches_done"), "1");

  Outcome resumed = run("char_lstm", tiny(data, "--epochs 2 --resume " + ckpt));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at epoch 1, batch 2"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("epoch  1  train loss"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("epoch  2  train loss"), std::string::npos) << resumed.output;

  // The stopped and resumed run ends where an uninterrupted one does.
  Outcome whole = run("char_lstm", tiny(data, "--epochs 2"));
  ASSERT_EQ(whole.status, 0) << whole.output;
  auto epoch2 = [](const std::string& output) {
    const size_t from = output.find("epoch  2  train loss"), to = output.find(" bpc", from);
    return from == std::string::npos || to == std::string::npos ? std::string("(none)")
                                                                : output.substr(from, to - from);
  };
  EXPECT_EQ(epoch2(resumed.output), epoch2(whole.output)) << resumed.output << "\n" << whole.output;
  EXPECT_NE(epoch2(whole.output), "(none)");

  // A position the epoch does not have (another --batch-size, say) is refused.
  std::map<std::string, std::string> metadata = load_safetensors_metadata(ckpt);
  metadata["batches_done"] = "9";
  save_safetensors(path("far.safetensors"), load_safetensors(ckpt), metadata);
  expect_failure("char_lstm", tiny(data, "--epochs 2 --resume " + path("far.safetensors")),
                 "had trained 9 batches of epoch 1, but an epoch now has 8");
}

// A checkpoint of a completed epoch resumed with more batches per epoch (a smaller --batch-size)
// goes on with the next epoch, not back into the finished one; a mid-epoch one is refused.
TEST_F(CharLstmCli, ResumeAfterCompletedEpochWithOtherBatchSizeStartsTheNextEpoch) {
  const std::string data = corpus(), ckpt = path("ckpt.safetensors");
  ASSERT_EQ(run("char_lstm", tiny(data, "--epochs 2 --checkpoint " + ckpt)).status, 0);
  Outcome smaller = run("char_lstm", tiny(data, "--epochs 3 --resume " + ckpt + " --batch-size 2"));
  ASSERT_EQ(smaller.status, 0) << smaller.output;
  EXPECT_NE(smaller.output.find("at epoch 3, batch 1"), std::string::npos) << smaller.output;
  EXPECT_NE(smaller.output.find("16 batches/epoch"), std::string::npos) << smaller.output;
  EXPECT_NE(smaller.output.find("--batch-size 2 differs from the checkpoint's 4"), std::string::npos) << smaller.output;
  EXPECT_EQ(smaller.output.find("epoch  2  train loss"), std::string::npos) << smaller.output;
  EXPECT_NE(smaller.output.find("epoch  3  train loss"), std::string::npos) << smaller.output;

  const std::string partial = path("partial.safetensors");
  ASSERT_EQ(run("char_lstm", tiny(data, "--epochs 2 --max-minutes 1e-6 --checkpoint " + partial)).status, 0);
  expect_usage_error("char_lstm", tiny(data, "--epochs 2 --resume " + partial + " --batch-size 2"),
                     "--batch-size 2 differs from the checkpoint's 4, and the checkpoint stopped mid-epoch "
                     "(after batch 1 of 8 in epoch 1)");
  expect_usage_error("char_lstm", tiny(data, "--epochs 2 --resume " + partial + " --bucketing off"),
                     "--bucketing off differs from the checkpoint's on");
}

// Every setting the checkpoint records is checked: one that changes the data or the steps is
// refused naming the flag and both values, one left out takes the checkpoint's value, and other
// text under the same vocabulary is refused.
TEST_F(CharLstmCli, ResumeChecksEveryRecordedSetting) {
  const std::string data = corpus(), ckpt = path("ckpt.safetensors");
  ASSERT_EQ(run("char_lstm", tiny(data, "--epochs 1 --checkpoint " + ckpt)).status, 0);
  expect_usage_error("char_lstm", tiny(data, "--epochs 2 --resume " + ckpt + " --bptt 16"),
                     "--bptt 16 differs from the checkpoint's 8");
  expect_usage_error("char_lstm", tiny(data, "--epochs 2 --resume " + ckpt + " --seed 3"),
                     "--seed 3 differs from the checkpoint's 0");
  expect_usage_error("char_lstm", tiny(data, "--epochs 2 --resume " + ckpt + " --limit-records 5"),
                     "--limit-records 5 differs from the checkpoint's 0");
  expect_usage_error("char_lstm", tiny(data, "--epochs 2 --resume " + ckpt + " --valid-fraction 0.25"),
                     "--valid-fraction 0.25 differs from the checkpoint's 0.2");
  // Left out, --bptt and --batch-size come from the checkpoint, not the defaults (128, 32).
  Outcome adopted = run("char_lstm", "--device cpu --data " + data + " --epochs 2 --resume " + ckpt);
  ASSERT_EQ(adopted.status, 0) << adopted.output;
  EXPECT_NE(adopted.output.find("batch 4, bptt 8"), std::string::npos) << adopted.output;
  EXPECT_NE(adopted.output.find("at epoch 2, batch 1"), std::string::npos) << adopted.output;

  // The same characters in other records: the vocabulary matches, the text does not.
  const std::string edited = path("edited");
  write_corpus(edited, {"The cat sat on the mat.", "A dog ran; the cat hid!", "Is it early? No, it is late."});
  expect_failure("char_lstm", tiny(edited, "--epochs 2 --resume " + ckpt), "was trained on other records than --data");

  // A checkpoint without the record (an older char_lstm's) cannot be resumed, only sampled from.
  std::map<std::string, std::string> metadata = load_safetensors_metadata(ckpt);
  metadata.erase("batch_size");
  save_safetensors(path("old.safetensors"), load_safetensors(ckpt), metadata);
  expect_failure("char_lstm", tiny(data, "--epochs 2 --resume " + path("old.safetensors")), "has no 'batch_size'");
  EXPECT_EQ(run("char_lstm", "--device cpu --sample 5 --resume " + path("old.safetensors")).status, 0);
}

TEST_F(CharLstmCli, MetricsPerEpochAndPerEvalLine) {
  const std::string data = corpus(), jsonl = path("char.jsonl"), csv = path("char.csv");
  Outcome r = run("char_lstm", tiny(data, "--epochs 2 --eval-every 4 --metrics " + jsonl + " --metrics-csv " + csv));
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> records = read_jsonl(jsonl);
  // Per epoch of 8 batches: the --eval-every line at batch 4, then the epoch's end.
  ASSERT_EQ(records.size(), 4u);
  const std::vector<int> steps{4, 8, 12, 16};
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i]["step"], steps[i]);
    for (const char* key : {"train/loss", "valid/loss", "valid/bpc", "lr", "throughput/chars_per_s", "train/grad_norm"})
      EXPECT_TRUE(records[i][key].is_number()) << key << " in " << records[i].dump();
  }
  EXPECT_FALSE(records[0].contains("train/padding_share"));
  EXPECT_TRUE(records[1]["train/padding_share"].is_number());
  // The padding share first appears in the second row: the CSV gains a column, the first row an empty cell.
  std::ifstream in(csv);
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  EXPECT_EQ(header.substr(header.rfind(',') + 1), "train/padding_share");
  EXPECT_EQ(first.back(), ',');
  expect_usage_error("char_lstm", "--sample 5 --resume x --metrics " + jsonl, "only apply to training");
}

// Multi-process runs are tested under mpirun (tests/distributed/example_run.cmake); here, that a
// build without MPI refuses the flag with a clear message instead of training alone.
TEST_F(ExamplesCli, DistributedNeedsMpi) {
  if (distributed::is_available()) GTEST_SKIP() << "this build has MPI";
  for (const char* program : {"mlp_seed", "mlp_fashion", "lstm_fashion", "char_lstm"})
    expect_usage_error(program, "--distributed", "--distributed: this build has no MPI support");
}

// --amp: the run under autocast (and loss scaling for f16, which needs CUDA); bad values are usage
// errors that name the flag.
TEST_F(ExamplesCli, AmpFlag) {
  testing::write_fashion_folder(data(), 32, 10);
  for (const char* program : {"mlp_seed", "mlp_fashion", "lstm_fashion"}) {
    const std::string base = std::string(program) == "mlp_seed" ? "--device cpu --batches 3" : fashion("--epochs 1");
    expect_usage_error(program, base + " --amp fp8", "--amp must be off, bf16 or f16, got 'fp8'");
    expect_usage_error(program, base + " --amp f16", "--amp f16 needs a CUDA device");
    Outcome r = run(program, base + " --amp bf16");
    EXPECT_EQ(r.status, 0) << program << ":\n" << r.output;
    EXPECT_NE(r.output.find(", amp bf16"), std::string::npos) << program << ":\n" << r.output;
  }
}

// --cuda-graph: a CUDA-only flag, refused with a clear message on the CPU (the capture itself is
// tested in test_cuda_graph.cpp).
TEST_F(ExamplesCli, CudaGraphFlagNeedsCuda) {
  testing::write_fashion_folder(data(), 32, 10);
  for (const char* program : {"mlp_seed", "mlp_fashion", "lstm_fashion"}) {
    const std::string base = std::string(program) == "mlp_seed" ? "--device cpu --batches 3" : fashion("--epochs 1");
    expect_usage_error(program, base + " --cuda-graph", "--cuda-graph needs a CUDA device, got cpu");
  }
}

// --cuda-graph on a CUDA device (the emulated one in the emulation build): the training steps and
// the evaluation forward (GraphedForward, under InferenceMode) replay graphs, and every epoch's
// losses and test accuracy are those of the eager run. Three epochs: the evaluation warms up in the
// first, is captured in the second and replayed in the third.
TEST_F(ExamplesCli, CudaGraphRunMatchesTheEagerRun) {
  if (!tapegrad::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  testing::write_fashion_folder(data(), 32, 10);
  const std::string base = "--device cuda --hidden 16 --batch-size 8 --epochs 3 --data " + data();
  Outcome eager = run("mlp_fashion", base);
  Outcome graphed = run("mlp_fashion", base + " --cuda-graph");
  ASSERT_EQ(eager.status, 0) << eager.output;
  ASSERT_EQ(graphed.status, 0) << graphed.output;
  // Each epoch line without its speed and time: "epoch  1  train loss ...  test accuracy ...".
  auto epochs = [](const std::string& output) {
    std::vector<std::string> lines;
    size_t at = 0;
    while ((at = output.find("epoch ", at)) != std::string::npos) {
      const size_t end = output.find("  test accuracy", at);
      const size_t accuracy_end = output.find("  ", end + 16);
      if (end == std::string::npos || accuracy_end == std::string::npos) break;
      lines.push_back(output.substr(at, accuracy_end - at));
      at = accuracy_end;
    }
    return lines;
  };
  const std::vector<std::string> eager_epochs = epochs(eager.output), graphed_epochs = epochs(graphed.output);
  ASSERT_EQ(eager_epochs.size(), 3u) << eager.output;
  EXPECT_EQ(graphed_epochs, eager_epochs) << graphed.output;
  EXPECT_NE(graphed.output.find(", cuda graph"), std::string::npos) << graphed.output;
}

// classify_fashion serves an mlp_fashion checkpoint (docs/inference.md, "Serving a model"): one
// line per input, from stdin (pixel values or a PGM path) or from PGM files named as arguments; the
// same image gives the same line whichever way it comes; bad inputs are named on stderr while the
// others are still classified, and the exit status is then 1.
TEST_F(ExamplesCli, ClassifyFashionServesACheckpoint) {
  testing::write_fashion_folder(data(), 32, 10);
  const std::string ckpt = path("mlp.safetensors");
  ASSERT_EQ(run("mlp_fashion", fashion("--epochs 1 --checkpoint " + ckpt)).status, 0);
  // One image three ways: 784 values on a line, a binary PGM and a text PGM.
  std::string values, text_pixels, binary_pixels;
  for (int i = 0; i < 784; ++i) {
    const int v = (i * 37) % 256;
    values += (i ? "," : "") + std::to_string(v);
    text_pixels += std::to_string(v) + (i % 28 == 27 ? "\n" : " ");
    binary_pixels += static_cast<char>(v);
  }
  const std::string p5 = path("image.pgm"), p2 = path("image_text.pgm"), lines = path("lines.txt");
  std::ofstream(p5, std::ios::binary) << "P5\n# a comment\n28 28\n255\n" << binary_pixels;
  std::ofstream(p2) << "P2\n28 28\n255\n" << text_pixels;
  std::ofstream(lines) << values << "\n\n" << p5 << "\n";
  const std::string model = "--checkpoint " + ckpt + " ";
  Outcome from_stdin = run("classify_fashion", model + "< " + lines);
  ASSERT_EQ(from_stdin.status, 0) << from_stdin.output;
  Outcome from_files = run("classify_fashion", model + p5 + " " + p2);
  ASSERT_EQ(from_files.status, 0) << from_files.output;
  // "<input>\t<class>\t<probability>": the class and probability after the input's name.
  auto results = [](const std::string& output) {
    std::vector<std::string> out;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
      if (line.find('\t') != std::string::npos) out.push_back(line.substr(line.find('\t')));
    return out;
  };
  const std::vector<std::string> a = results(from_stdin.output), b = results(from_files.output);
  ASSERT_EQ(a.size(), 2u) << from_stdin.output;  // the blank line is skipped
  ASSERT_EQ(b.size(), 2u) << from_files.output;
  EXPECT_EQ(a[0], a[1]);
  EXPECT_EQ(b[0], a[0]);
  EXPECT_EQ(b[1], a[0]);
  EXPECT_NE(from_stdin.output.find("line 1\t"), std::string::npos) << from_stdin.output;
  EXPECT_NE(from_files.output.find(p5 + "\t"), std::string::npos) << from_files.output;
  EXPECT_NE(from_stdin.output.find("2 inputs classified"), std::string::npos) << from_stdin.output;

  // Bad inputs: each named, the good one still classified, exit status 1.
  const std::string small = path("small.pgm"), bad_lines = path("bad.txt");
  std::ofstream(small, std::ios::binary) << "P5\n27 28\n255\n" << binary_pixels.substr(0, 27 * 28);
  std::ofstream(bad_lines) << "1, 2, 3, 4, 5\n"
                           << values << "\n"
                           << path("missing.pgm") << "\n"
                           << small << "\n"
                           << values.substr(0, values.rfind(',') + 1) << "999\n";
  Outcome bad = run("classify_fashion", model + "< " + bad_lines);
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("line 1: 5 pixel values, expected 784"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("missing.pgm: cannot open"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("small.pgm: the image is 27x28, not 28x28"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("line 5: pixel 783 '999' is not a number in 0..255"), std::string::npos) << bad.output;
  EXPECT_EQ(results(bad.output).size(), 1u) << bad.output;
  EXPECT_NE(bad.output.find("1 inputs classified"), std::string::npos) << bad.output;

  // Not a checkpoint of mlp_fashion, and no checkpoint at all.
  const std::string lstm_ckpt = path("lstm.safetensors");
  ASSERT_EQ(run("lstm_fashion", fashion("--epochs 1 --checkpoint " + lstm_ckpt)).status, 0);
  expect_failure("classify_fashion", "--checkpoint " + lstm_ckpt + " " + p5, "not an mlp_fashion checkpoint");
  expect_usage_error("classify_fashion", p5, "--checkpoint is required");
}

// Hardening: an output flag naming an input (or another output) destroyed it. Refused before any
// file is opened, naming both flags; "same" sees through symlinks, "./", hard links and files that
// do not exist yet. --checkpoint X --resume X stays allowed (resuming in place).
TEST_F(ExamplesCli, OutputPathsThatNameAnInputAreRefused) {
  testing::write_fashion_folder(data(), 32, 10);
  const std::string ckpt = path("ckpt.safetensors");
  ASSERT_EQ(run("mlp_fashion", fashion("--epochs 1 --checkpoint " + ckpt)).status, 0);
  const std::string good = read_bytes(ckpt);
  fs::create_symlink(ckpt, path("link.safetensors"));
  fs::create_hard_link(ckpt, path("hard.safetensors"));
  expect_usage_error("mlp_fashion", fashion("--epochs 2 --resume " + ckpt + " --metrics " + ckpt),
                     "--metrics and --resume name the same file: '" + ckpt + "'");
  expect_usage_error("mlp_fashion",
                     fashion("--epochs 2 --resume " + ckpt + " --metrics-csv " + path("link.safetensors")),
                     "--metrics-csv and --resume");
  expect_usage_error("mlp_fashion", fashion("--epochs 2 --resume " + ckpt + " --profile " + path("hard.safetensors")),
                     "--profile and --resume");
  expect_usage_error("lstm_fashion",
                     fashion("--epochs 2 --resume " + dir_.string() + "/./ckpt.safetensors --tensorboard " + ckpt),
                     "--tensorboard and --resume");
  expect_usage_error("mlp_fashion", fashion("--checkpoint " + data() + "/train-images-idx3-ubyte.gz"),
                     "--checkpoint and --data");
  EXPECT_EQ(read_bytes(ckpt), good);
  // Two outputs, neither existing yet.
  expect_usage_error(
      "mlp_seed",
      "--device cpu --batches 1 --metrics " + path("m.json") + " --profile " + dir_.string() + "/sub/../m.json",
      "--metrics and --profile name the same file");
  EXPECT_FALSE(fs::exists(path("m.json")));
  expect_usage_error("train_demo", "--steps 1 --metrics " + path("t.json") + " --metrics-csv " + path("t.json"),
                     "--metrics and --metrics-csv");
  // char_lstm reads every file of its --data folder: an output inside it is refused too.
  fs::create_directories(path("corpus"));
  std::ofstream(path("corpus/tiny")) << "a b c\n%\nd e f\n%\n";
  expect_usage_error("char_lstm", "--device cpu --data " + path("corpus") + " --metrics " + path("corpus/m.jsonl"),
                     "--metrics and --data overlap");
  expect_usage_error("char_lstm", "--device cpu --data " + path("corpus/tiny") + " --checkpoint " + path("corpus/tiny"),
                     "--checkpoint and --data name the same file");
}

// Hardening: Ctrl-C during a profiled run left a 0-byte trace (the file was truncated at the
// start and written only at the end). Now the trace is written whole at the end or not at all: an
// earlier trace at that path survives the interrupted run.
TEST_F(ExamplesCli, InterruptedProfileRunLeavesThePreviousTrace) {
#ifdef TAPEGRAD_EXAMPLES_DIR
  const std::string trace = path("trace.json");
  std::ofstream(trace) << "{\"earlier\": true}";
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    const std::string program = std::string(TAPEGRAD_EXAMPLES_DIR) + "/mlp_seed";
    ::execl(program.c_str(), program.c_str(), "--threads", "1", "--device", "cpu", "--batches", "1000000000",
            "--batch-size", "4", "--profile", trace.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  // Interrupt once training has started (the banner line is printed before the first step).
  std::string seen;
  char c;
  while (seen.find('\n') == std::string::npos && ::read(out[0], &c, 1) == 1) seen += c;
  ::kill(child, SIGINT);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(out[0]);
  EXPECT_NE(seen.find("mlp_seed on cpu"), std::string::npos) << seen;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status;
  EXPECT_EQ(read_bytes(trace), "{\"earlier\": true}");
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
#endif
}

}  // namespace
}  // namespace tapegrad
