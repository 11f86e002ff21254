// Atomic whole-file writes: a unique temporary file beside the target, synced and renamed over it
// (see Note [atomic output files] in atomic_file.h).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tapegrad/core/error.h"

namespace tapegrad::detail {
namespace {

// Linux's limit on one name in a directory.
constexpr size_t kMaxNameBytes = NAME_MAX;

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Best effort: makes the rename itself durable. Failing here loses no data, so it does not throw.
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string resolve_output_path(const char* who, const std::string& path) {
  std::string current = path;
  for (int links = 0; links <= 40; ++links) {
    struct stat st;
    if (::lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return current;
    std::vector<char> buffer(static_cast<size_t>(st.st_size > 0 ? st.st_size : PATH_MAX) + 1);
    const ssize_t n = ::readlink(current.c_str(), buffer.data(), buffer.size());
    if (n < 0 || static_cast<size_t>(n) >= buffer.size()) {
      const int err = n < 0 ? errno : ENAMETOOLONG;
      detail::throw_error(
          str_cat(who, ": ", path, ": cannot read the symbolic link ", current, " (", std::strerror(err), ")"));
    }
    const std::string target(buffer.data(), static_cast<size_t>(n));
    const size_t slash = current.find_last_of('/');
    current = target.front() == '/' || slash == std::string::npos ? target : current.substr(0, slash + 1) + target;
  }
  detail::throw_error(str_cat(who, ": ", path, ": too many levels of symbolic links"));
}

AtomicFileWriter::AtomicFileWriter(const char* who, const std::string& path)
    : who_(who), path_(path), target_(resolve_output_path(who, path)) {
  TG_CHECK(!path.empty(), who_, ": the output path is empty");
  struct stat st;
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) fail("is a directory", EISDIR);
  if (exists && !S_ISREG(st.st_mode)) {
    // /dev/null, a FIFO, a terminal: write in place; a rename would replace the device node.
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) fail("cannot open it for writing", errno);
    return;
  }
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  const size_t slash = target_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : target_.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? target_ : target_.substr(slash + 1);
  int err = 0;
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    const std::string suffix = str_cat(".tmp.", ::getpid(), ".", counter++, ".", std::hex, entropy());
    // A name near the limit still gets a temporary: its own name is shortened, not the target's.
    if (base.size() + suffix.size() > kMaxNameBytes) base.resize(kMaxNameBytes - suffix.size());
    temp_ = dir + base + suffix;
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    err = errno;
    if (fd_ < 0 && err != EEXIST) break;
  }
  if (fd_ < 0) {
    temp_.clear();
    fail("cannot create a temporary file beside it", err);
  }
  // The replacement keeps the permissions of the file it replaces (a private checkpoint stays private).
  if (exists) (void)::fchmod(fd_, st.st_mode & 07777);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t size) {
  TG_CHECK(fd_ >= 0 && !committed_, who_, ": ", path_, ": write after the file was committed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed", n < 0 ? errno : EIO);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

int AtomicFileWriter::commit_and_release() {
  TG_CHECK(fd_ >= 0 && !committed_, who_, ": ", path_, ": committed twice");
  if (!temp_.empty()) {
    // Flushed to disk before the rename, so the final name never points at a half-written file.
    if (::fsync(fd_) != 0) fail("fsync failed", errno);
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      detail::throw_error(str_cat(who_, ": ", path_, ": cannot rename ", temp_, " over it (", std::strerror(err), ")"));
    }
    sync_directory(directory_of(target_));
  }
  committed_ = true;
  return std::exchange(fd_, -1);
}

void AtomicFileWriter::commit() {
  const int fd = commit_and_release();
  // The data is synced already; a failing close of a special file (an NFS-like device) still reports.
  if (::close(fd) != 0 && temp_.empty()) fail("close failed", errno);
}

void AtomicFileWriter::fail(const char* what, int err) const {
  const std::string via = target_ != path_ ? str_cat(" (a link to ", target_, ")") : std::string();
  detail::throw_error(str_cat(who_, ": ", path_, via, ": ", what, " (", std::strerror(err), ")"));
}

void write_file_atomically(const char* who, const std::string& path, std::string_view bytes) {
  AtomicFileWriter out(who, path);
  out.write(bytes);
  out.commit();
}

}  // namespace tapegrad::detail
