// Whole-file writes that never show a partial file under the final name: the bytes go to a unique
// temporary file beside the target, which is synced and renamed over it. Used by checkpoints
// (save_safetensors), the profiler's Chrome trace and the metrics CSV.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tapegrad::detail {

// The file that writing to `path` updates: `path` itself, or, when it is a symbolic link, the
// file its chain of links ends at (which need not exist yet), as open(2) would follow it. Only the
// last component is resolved; directories on the way are left to the kernel. Throws
// tapegrad::Error naming `who` and the path for a chain of more than 40 links or an unreadable link.
std::string resolve_output_path(const char* who, const std::string& path);

// Note [atomic output files]: writing `path`
//  - resolves it first (resolve_output_path), so a symlink at `path` is written through (its target
//    gets the new bytes, the link stays), as torch.save and open(2) do;
//  - creates "<target>.tmp.<pid>.<n>.<random>" in the target's directory (so the rename stays on
//    one file system) with O_CREAT | O_EXCL | O_NOFOLLOW: two writers never share a temporary,
//    and a file or symlink planted at a predictable name is never followed or truncated;
//  - gives it the mode of the file it replaces; fsyncs, closes and renames it over the target, then
//    fsyncs the directory; removes it when anything fails or the writer is dropped uncommitted.
// A target that exists and is not a regular file (/dev/null, a FIFO, a terminal) is written in
// place: renaming over it would replace the device with a regular file. A directory is an error.
class AtomicFileWriter {
 public:
  // Opens the temporary file (or the special file). Throws tapegrad::Error "who: path: ..." when the
  // target is a directory or no temporary file can be created beside it.
  AtomicFileWriter(const char* who, const std::string& path);
  ~AtomicFileWriter();  // removes an uncommitted temporary file
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Writes all of it (retrying short writes); throws tapegrad::Error naming the path.
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Syncs and renames the file into place, then closes it.
  void commit();
  // As commit(), but hands over the still-open descriptor (positioned at the end of the file,
  // which is now at the final name) instead of closing it; the caller closes it.
  int commit_and_release();

  int fd() const { return fd_; }
  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }  // "" when writing a special file in place

 private:
  [[noreturn]] void fail(const char* what, int err) const;

  const char* who_;
  std::string path_;    // as given, for messages
  std::string target_;  // path_ with its symlinks resolved
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole of `bytes` written to `path` as above.
void write_file_atomically(const char* who, const std::string& path, std::string_view bytes);

}  // namespace tapegrad::detail
