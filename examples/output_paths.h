// The examples' guard against writing over their own inputs: an output flag (--checkpoint,
// --metrics, --metrics-csv, --tensorboard, --profile) that names the same file as an input flag
// (--resume, --data) or as another output is a usage error naming both flags and the path, raised
// before any file is opened. Every example calls check_output_paths() first thing after parsing.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cxxopts.hpp>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "cli_values.h"

namespace examples {

// One path flag. `flag` is the name without dashes.
struct PathFlag {
  std::string flag, path;
};

// Note [same file]: two paths name the same file when, after following symbolic links, they are
// the same existing file (device and inode: this sees hard links too) or, for a file that does not
// exist yet, the same canonical directory and name ("./a", "a", "dir/../a" and a dangling symlink
// to "a" are all "a"). An input that is a directory (--data of char_lstm) also covers everything
// below it: the corpus reads every file there, so an output inside it would be read back as text.
class FileIdentity {
 public:
  explicit FileIdentity(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p(path);
    // Follow a chain of links at the last component by hand: a dangling one still names its target.
    for (int links = 0; links < 40 && fs::is_symlink(p, ec); ++links) {
      const fs::path target = fs::read_symlink(p, ec);
      if (ec) break;
      p = target.is_absolute() ? target : p.parent_path() / target;
    }
    struct stat st;
    exists_ = ::stat(p.c_str(), &st) == 0;
    if (exists_) {
      device_ = st.st_dev;
      inode_ = st.st_ino;
      directory_ = S_ISDIR(st.st_mode);
    }
    canonical_ = fs::weakly_canonical(fs::absolute(p, ec), ec);
    if (ec) canonical_ = fs::absolute(p).lexically_normal();
  }

  bool same_file(const FileIdentity& other) const {
    if (exists_ && other.exists_) return device_ == other.device_ && inode_ == other.inode_;
    return canonical_ == other.canonical_;
  }
  // `this` is, or lies below, the directory `folder`.
  bool inside(const FileIdentity& folder) const {
    if (same_file(folder)) return true;
    if (!folder.directory_) return false;
    const std::string dir = folder.canonical_.string(), mine = canonical_.string();
    return mine.size() > dir.size() && mine.compare(0, dir.size(), dir) == 0 &&
           (dir.back() == '/' || mine[dir.size()] == '/');
  }

 private:
  bool exists_ = false, directory_ = false;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  std::filesystem::path canonical_;
};

// Throws UsageError when an output names the same file as an input (or lies inside an input
// directory) or as another output. Empty paths are flags not given. `allowed` pairs (output,
// input) may name the same file: --checkpoint X --resume X continues a run in place, which is safe
// because the checkpoint is read whole before the first save and each save is atomic.
inline void check_output_paths(const std::vector<PathFlag>& inputs, const std::vector<PathFlag>& outputs,
                               const std::vector<std::pair<std::string, std::string>>& allowed = {}) {
  auto is_allowed = [&](const std::string& output, const std::string& input) {
    for (const auto& [o, i] : allowed)
      if (o == output && i == input) return true;
    return false;
  };
  auto refuse = [](const PathFlag& a, const PathFlag& b, const char* how) {
    const std::string same = a.path == b.path ? "'" + a.path + "'" : "'" + a.path + "' and '" + b.path + "'";
    throw UsageError("--" + a.flag + " and --" + b.flag + " " + how + ": " + same +
                     "; writing the output would destroy the other (give it another path)");
  };
  std::vector<FileIdentity> output_ids;
  for (const PathFlag& out : outputs) output_ids.emplace_back(out.path);
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].path.empty()) continue;
    for (const PathFlag& in : inputs) {
      if (in.path.empty() || is_allowed(outputs[o].flag, in.flag)) continue;
      const FileIdentity input(in.path);
      if (output_ids[o].same_file(input)) refuse(outputs[o], in, "name the same file");
      if (output_ids[o].inside(input)) refuse(outputs[o], in, "overlap (the output is inside the input folder)");
    }
    for (size_t k = 0; k < o; ++k)
      if (!outputs[k].path.empty() && output_ids[o].same_file(output_ids[k]))
        refuse(outputs[k], outputs[o], "name the same file");
  }
}

// The flags that the metrics and profiling options add (metrics_cli.h, profile_cli.h), where the
// example has them.
inline std::vector<PathFlag> logging_outputs(const cxxopts::ParseResult& args) {
  std::vector<PathFlag> outputs;
  for (const char* flag : {"metrics", "metrics-csv", "tensorboard", "profile"}) {
    try {
      outputs.push_back({flag, args[flag].as<std::string>()});
    } catch (const cxxopts::exceptions::exception&) {
      // not one of this example's flags
    }
  }
  return outputs;
}

}  // namespace examples
