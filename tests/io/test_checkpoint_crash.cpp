// Crash safety of checkpoints: a process killed with SIGKILL in the middle of save_safetensors
// leaves the previous checkpoint loadable and unchanged.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "tapegrad/tapegrad.h"

using namespace tapegrad;

namespace {

std::string temp_dir() {
  char pattern[] = "/tmp/tapegrad_crash_XXXXXX";
  const char* dir = mkdtemp(pattern);
  if (dir == nullptr) throw std::runtime_error("mkdtemp failed");
  return dir;
}

off_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// The largest temporary file a save to `path` has made so far (a unique name beside it,
// "path.tmp.<pid>.<n>.<random>"), or -1.
off_t largest_temporary(const std::string& dir, const std::string& path) {
  off_t largest = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().string();
    if (name.rfind(path + ".tmp.", 0) == 0) largest = std::max(largest, file_size(name));
  }
  return largest;
}

TEST(CheckpointCrash, SigkillMidWriteKeepsThePreviousCheckpoint) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/model.safetensors";
  Generator generator(11);
  StateDict previous = {{"weight", randn({256, 64}, TensorOptions(), &generator)},
                        {"bias", randn({64}, TensorOptions(), &generator)}};
  save_safetensors(path, previous, {{"epoch", "1"}});

  // Made before fork: the child only writes (no new OpenMP work after fork).
  const int64_t big = int64_t{96} << 20;  // 384 MiB of float32: the write takes a while
  StateDict next = {{"weight", full({big}, 2.0)}, {"bias", zeros({64})}};

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      save_safetensors(path, next, {{"epoch", "2"}});
    } catch (...) {
    }
    _exit(0);
  }
  // Kill the writer once its temporary file is partly written.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool partial = false;
  while (std::chrono::steady_clock::now() < deadline) {
    off_t size = largest_temporary(dir, path);
    if (size > (off_t{1} << 20)) {
      partial = true;
      break;
    }
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) break;  // finished before we saw it: no kill
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(partial) << "the writer finished before it could be interrupted";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // The checkpoint at `path` is the previous one, whole.
  StateDict loaded = load_safetensors(path);
  ASSERT_EQ(loaded.size(), previous.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(loaded[i].first, previous[i].first);
    EXPECT_EQ(loaded[i].second.tolist<float>(), previous[i].second.tolist<float>()) << loaded[i].first;
  }
  EXPECT_EQ(load_safetensors_metadata(path).at("epoch"), "1");

  // A later save over the leftover temporary file still works.
  save_safetensors(path, previous, {{"epoch", "3"}});
  EXPECT_EQ(load_safetensors_metadata(path).at("epoch"), "3");
  std::filesystem::remove_all(dir);
}

}  // namespace
