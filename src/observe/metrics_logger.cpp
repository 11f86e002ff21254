// MetricsLogger: one record per log() call, fanned out to JSON Lines, CSV and TensorBoard.
#include "tapegrad/observe/metrics_logger.h"

#include <sys/file.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <system_error>

#include "data/utf8.h"
#include "io/atomic_file.h"
#include "observe/output_file.h"
#include "tapegrad/core/error.h"
#include "tapegrad/observe/tensorboard.h"

namespace tapegrad::observe {
namespace {

constexpr const char* kWho = "MetricsLogger";

// The shortest text that reads back as the same double; NaN and infinities as nan, inf, -inf
// (what numpy, pandas and Python's float() read) for the CSV file.
std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// JSON has no NaN or infinity: those are written as null (docs/logging.md).
std::string json_number(double value) {
  return std::isfinite(value) ? number_text(value) : "null";
}

// `text` is valid UTF-8 here (log() replaces invalid bytes); quotes, backslashes and control
// characters are escaped.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The CSV file and its columns (after step and wall_time).
class CsvWriter {
 public:
  explicit CsvWriter(const std::string& path) : path_(path) {
    create_parent_directories(kWho, path);
    out_ = OutputFile(kWho, path, OutputFile::Mode::Truncate);
    out_.write(header());
  }

  void write(int64_t step, double wall_time, const Scalars& scalars) {
    std::vector<std::string> added;
    for (const auto& [name, value] : scalars)
      if (column_of(name) < 0) added.push_back(name);
    if (!added.empty()) widen(added);
    std::vector<std::string> cells(columns_.size());
    for (const auto& [name, value] : scalars) cells[static_cast<size_t>(column_of(name))] = number_text(value);
    std::string row = std::to_string(step) + "," + number_text(wall_time);
    for (const std::string& cell : cells) row += "," + cell;
    out_.write(row + "\n");
  }

  void close() { out_.close(); }

 private:
  std::string header() const {
    std::string line = "step,wall_time";
    for (const std::string& c : columns_) line += "," + csv_field(c);
    return line + "\n";
  }

  int column_of(const std::string& name) const {
    for (size_t i = 0; i < columns_.size(); ++i)
      if (columns_[i] == name) return static_cast<int>(i);
    return -1;
  }

  // Note [CSV columns]: a metric first seen after some rows becomes a new last column. The file is
  // rewritten through a unique temporary file beside it (Note [atomic output files] in
  // io/atomic_file.h: a symlinked path is written through, a crash leaves either the old or the
  // new file) and the earlier rows get empty cells for it. The new file is locked before it takes
  // the old one's name, and its descriptor is kept for the next rows. New metrics usually all
  // appear within the first epoch, so this happens a few times per run. A CSV that is not a
  // regular file (a pipe, /dev/null) cannot be read back: it gets the wider header as a new line.
  void widen(const std::vector<std::string>& added) {
    const size_t pad = added.size();
    columns_.insert(columns_.end(), added.begin(), added.end());
    if (!out_.is_regular_file()) {
      out_.write(header());
      return;
    }
    detail::AtomicFileWriter rewritten(kWho, path_);
    std::ifstream in(rewritten.target(), std::ios::binary);
    TG_CHECK(in.good(), kWho, ": cannot read back '", path_, "' to add the column '", added.front(), "'");
    std::string text = header(), line;
    std::getline(in, line);  // the old header
    while (std::getline(in, line)) text += line + std::string(pad, ',') + "\n";
    rewritten.write(text);
    (void)::flock(rewritten.fd(), LOCK_EX | LOCK_NB);  // new and unique: nobody else holds it
    out_ = OutputFile(kWho, path_, rewritten.commit_and_release());
  }

  std::string path_;
  OutputFile out_;
  std::vector<std::string> columns_;
};

// The metrics of one record with names that are valid UTF-8 (each invalid byte becomes U+FFFD),
// checked: non-empty, not reserved, no line breaks, unique.
Scalars checked_names(int64_t step, const Scalars& scalars) {
  Scalars out;
  out.reserve(scalars.size());
  std::set<std::string> names;
  for (const auto& [given, value] : scalars) {
    const std::string name = detail::utf8_replace_invalid(given);
    TG_CHECK(!name.empty(), kWho, ".log: an empty metric name at step ", step);
    TG_CHECK(name != "step" && name != "wall_time", kWho, ".log: '", name,
             "' is reserved (a metric cannot be named so)");
    TG_CHECK(name.find_first_of("\r\n") == std::string::npos, kWho, ".log: the metric name '", name,
             "' contains a line break");
    TG_CHECK(names.insert(name).second, kWho, ".log: the metric '", name, "' appears twice at step ", step);
    out.emplace_back(name, value);
  }
  return out;
}

}  // namespace

struct MetricsLogger::Impl {
  std::mutex mutex;
  bool closed = false;
  OutputFile jsonl;
  std::unique_ptr<CsvWriter> csv;
  std::unique_ptr<TensorBoardWriter> tensorboard;
};

MetricsLogger::MetricsLogger(const MetricsLoggerOptions& options) : impl_(std::make_unique<Impl>()) {
  if (!options.jsonl.empty()) {
    create_parent_directories(kWho, options.jsonl);
    impl_->jsonl = OutputFile(kWho, options.jsonl, OutputFile::Mode::Truncate);
  }
  if (!options.csv.empty()) impl_->csv = std::make_unique<CsvWriter>(options.csv);
  if (!options.tensorboard_dir.empty())
    impl_->tensorboard = std::make_unique<TensorBoardWriter>(options.tensorboard_dir);
}

MetricsLogger::~MetricsLogger() = default;

bool MetricsLogger::enabled() const {
  return impl_->jsonl.is_open() || impl_->csv || impl_->tensorboard;
}

std::string MetricsLogger::tensorboard_file() const {
  return impl_->tensorboard ? impl_->tensorboard->path() : "";
}

void MetricsLogger::log(int64_t step, const Scalars& given, std::optional<double> wall_time) {
  const Scalars scalars = checked_names(step, given);
  const double time = wall_time ? *wall_time : unix_time_now();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  TG_CHECK(!impl_->closed, kWho, ".log: the logger is closed");
  if (impl_->jsonl.is_open()) {
    std::string line = "{\"step\": " + std::to_string(step) + ", \"wall_time\": " + json_number(time);
    for (const auto& [name, value] : scalars) line += ", " + json_string(name) + ": " + json_number(value);
    impl_->jsonl.write(line + "}\n");
  }
  if (impl_->csv) impl_->csv->write(step, time, scalars);
  if (impl_->tensorboard) impl_->tensorboard->add_scalars(scalars, step, time);
}

void MetricsLogger::close() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->closed = true;
  impl_->jsonl.close();
  if (impl_->csv) impl_->csv->close();
  if (impl_->tensorboard) impl_->tensorboard->close();
}

}  // namespace tapegrad::observe
