// OutputFile: a file written with plain write() calls, one per record, so that everything logged
// so far is in the kernel's hands (a crashing process loses at most the record in flight), and
// whose errors name the path.
#pragma once

#include <string>
#include <utility>

namespace tapegrad::observe {

// Creates `dir` and its parents; throws tapegrad::Error naming `who` and the path on failure or
// when the path exists and is not a directory.
void create_directories(const char* who, const std::string& dir);
// The parent directory of `path`, when it has one, as above.
void create_parent_directories(const char* who, const std::string& path);
// Seconds since the Unix epoch.
double unix_time_now();

class OutputFile {
 public:
  // Truncate and Append take an exclusive lock on a regular file (flock, released at close), so a
  // second logger writing the same file, in this process or another, is an error naming the path
  // instead of two writers overwriting each other's records. Truncate empties the file only once
  // the lock is held. A path that is a symbolic link is written through.
  enum class Mode { Truncate, Append, CreateNew };
  OutputFile() = default;
  OutputFile(const char* who, std::string path, Mode mode);
  // Mode::CreateNew, except that an existing `path` returns false (the caller picks another name)
  // instead of throwing.
  bool create_new(const char* who, std::string path);
  // Takes over `fd`, an open descriptor of `path`.
  OutputFile(const char* who, std::string path, int fd) : who_(who), path_(std::move(path)), fd_(fd) {}
  ~OutputFile();
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Writes all of `data` (retrying short writes); throws tapegrad::Error naming the path.
  void write(const std::string& data);
  void close();
  bool is_open() const { return fd_ >= 0; }
  bool is_regular_file() const;
  const std::string& path() const { return path_; }

 private:
  const char* who_ = "";
  std::string path_;
  int fd_ = -1;
};

}  // namespace tapegrad::observe
