// Checkpoint atomicity against other writers: concurrent saves to one path never tear the file,
// and a file or symlink planted where a temporary might go is never followed or overwritten.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "support/test_util.h"
#include "tapegrad/io/safetensors.h"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

class CheckpointAtomic : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / (std::string("tapegrad_atomic_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Issue 16, item 4: a symlink at PATH.tmp made a save overwrite its target.
TEST_F(CheckpointAtomic, PlantedSymlinkAtTheOldTemporaryNameIsNotFollowed) {
  const std::string victim = path("victim.txt");
  { std::ofstream(victim) << "precious"; }
  const std::string p = path("ckpt.safetensors");
  fs::create_symlink(victim, p + ".tmp");
  save_safetensors(p, {{"w", full({1000}, 3.0)}});
  EXPECT_EQ(read_bytes(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(p + ".tmp"));
  EXPECT_EQ(load_safetensors(p)[0].second.sum().item(), 3000.0);
}

// Two writers saving to one path: every save that returns leaves a complete file, which is one of
// the writers' checkpoints, whole; no temporary file is left behind.
TEST_F(CheckpointAtomic, ConcurrentWritersToOnePathNeverTearIt) {
  const std::string p = path("ckpt.safetensors");
  constexpr int kWriters = 3, kSaves = 12;
  const int64_t n = int64_t{1} << 18;  // 1 MiB per checkpoint: a write takes a while
  std::vector<std::string> torn(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      StateDict mine = {{"w", full({n}, static_cast<double>(w + 1))}, {"id", full({1}, static_cast<double>(w + 1))}};
      for (int i = 0; i < kSaves; ++i) {
        try {
          save_safetensors(p, mine, {{"writer", std::to_string(w + 1)}});
          StateDict got = load_safetensors(p);
          // Whoever saved last, the file is whole: its "w" is constant and equals its "id".
          const double id = got.at(1).second.item();
          const double lo = got.at(0).second.min().item(), hi = got.at(0).second.max().item();
          if (lo != id || hi != id) torn[w] = "a checkpoint mixes writers' data";
        } catch (const std::exception& e) {
          torn[w] = e.what();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(torn[w], "") << "writer " << w;
  EXPECT_EQ(files(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST_F(CheckpointAtomic, FailedSaveLeavesNoTemporaryAndNoChange) {
  const std::string p = path("ckpt.safetensors");
  save_safetensors(p, {{"w", ones({4})}});
  const std::string before = read_bytes(p);
  expect_error([&] { save_safetensors(p, {{"w", ones({1})}, {"w", ones({1})}}); }, {"duplicate"});
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(files(), std::vector<std::string>{"ckpt.safetensors"});
  // Saving into a path whose directory is missing names the path.
  expect_error(
      [&] {
        save_safetensors(path("missing/x.safetensors"), {{"w", ones({1})}});
      },
      {"save_safetensors", "missing/x.safetensors", "cannot create"});
}

// Issue 16, item 7 (library side): loading a directory said "read failed at byte 0".
TEST_F(CheckpointAtomic, LoadingADirectoryIsAClearError) {
  expect_error([&] { load_safetensors(dir_.string()); }, {"load_safetensors", "is a directory"});
  expect_error([&] { load_safetensors_metadata(dir_.string()); }, {"load_safetensors_metadata", "is a directory"});
  expect_error([&] { load_safetensors(path("nope")); }, {"load_safetensors", "cannot open"});
}

// Hardening: a symlinked checkpoint path was replaced by a regular file; like torch.save, a save
// now writes through the link (also a dangling one), which stays a link.
TEST_F(CheckpointAtomic, SymlinkedPathIsWrittenThrough) {
  fs::create_directories(dir_ / "real");
  const std::string link = path("latest.safetensors");
  fs::create_symlink("real/ckpt.safetensors", link);  // dangling until the first save
  save_safetensors(link, {{"w", full({10}, 1.0)}});
  EXPECT_TRUE(fs::is_symlink(link));
  save_safetensors(link, {{"w", full({10}, 2.0)}});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(load_safetensors(path("real/ckpt.safetensors"))[0].second.sum().item(), 20.0);
  EXPECT_EQ(files(), (std::vector<std::string>{"latest.safetensors", "real"}));
  expect_error([&] { save_safetensors(path("real"), {{"w", full({1}, 1.0)}}); }, {"save_safetensors", "directory"});
}

// A destination that is not a regular file (a pipe here; /dev/null alike) is written in place:
// renaming over it would have replaced it with a regular file.
TEST_F(CheckpointAtomic, PipeDestinationIsWrittenInPlace) {
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string received;
  std::thread reader([&] { received = read_bytes(fifo); });
  save_safetensors(fifo, {{"w", full({4}, 1.0)}});
  reader.join();
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_GT(received.size(), 16u);
  EXPECT_EQ(files(), (std::vector<std::string>{"pipe"}));
}

}  // namespace
}  // namespace tapegrad
