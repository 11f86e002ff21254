// Files and directories for the metric writers: unbuffered writes and errors that name the path.
#include "observe/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "tapegrad/core/error.h"

namespace tapegrad::observe {

void create_directories(const char* who, const std::string& dir) {
  TG_CHECK(!dir.empty(), who, ": the directory name is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) TG_CHECK(false, who, ": cannot create the directory '", dir, "': ", ec.message());
  TG_CHECK(std::filesystem::is_directory(dir, ec), who, ": '", dir, "' exists and is not a directory");
}

void create_parent_directories(const char* who, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) create_directories(who, parent.string());
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

OutputFile::OutputFile(const char* who, std::string path, Mode mode) : who_(who), path_(std::move(path)) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY;
  if (mode == Mode::Append) flags |= O_APPEND;
  if (mode == Mode::CreateNew) flags |= O_EXCL;
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) {
    const int err = errno;
    TG_CHECK(false, who_, ": cannot open '", path_, "' for writing: ", std::strerror(err));
  }
  if (mode == Mode::CreateNew || !is_regular_file()) return;  // /dev/null and pipes are shared freely
  // Only a held lock is an error: a file system without flock (some network ones) gets no check.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    close();
    TG_CHECK(false, who_, ": '", path_,
             "' is already being written by another logger (in this process or another); "
             "give each output its own file");
  }
  if (mode == Mode::Truncate && ::ftruncate(fd_, 0) != 0) {
    const int err = errno;
    close();
    TG_CHECK(false, who_, ": cannot truncate '", path_, "': ", std::strerror(err));
  }
}

bool OutputFile::create_new(const char* who, std::string path) {
  close();
  who_ = who;
  path_ = std::move(path);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd_ < 0 && errno == EEXIST) return false;
  if (fd_ < 0) {
    const int err = errno;
    TG_CHECK(false, who_, ": cannot open '", path_, "' for writing: ", std::strerror(err));
  }
  return true;
}

bool OutputFile::is_regular_file() const {
  struct stat st;
  return fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
}

OutputFile::~OutputFile() {
  close();
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : who_(other.who_), path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    close();
    who_ = other.who_;
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void OutputFile::write(const std::string& data) {
  TG_CHECK(fd_ >= 0, who_, ": '", path_, "' is closed");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      TG_CHECK(false, who_, ": cannot write to '", path_, "': ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
}

void OutputFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace tapegrad::observe
