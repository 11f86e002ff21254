// MetricsLogger: named scalar metrics (loss, accuracy, learning rate, throughput, gradient norm,
// ...) at a step, written as any combination of JSON Lines, CSV and a TensorBoard event file.
// See docs/logging.md.
//
//   observe::MetricsLoggerOptions options;
//   options.jsonl = "runs/mlp/metrics.jsonl";
//   options.tensorboard_dir = "runs/mlp";
//   observe::MetricsLogger log(options);
//   log.log(step, {{"train/loss", loss}, {"lr", lr}});
//
// Formats (each log() call is one record, written at once with one write per file, so a crash
// loses at most the record being written and a running training can be watched):
//   JSON Lines: {"step": 100, "wall_time": 1764625870.25, "train/loss": 0.53, "lr": 0.001}, the
//     metrics in the order given; a NaN or infinite value is written as null (JSON has no NaN).
//   CSV: a header "step,wall_time,<metric>,..." and one row per record, empty cells for metrics
//     the record lacks; non-finite values as nan, inf, -inf. A metric first seen after some rows
//     adds a column at the end: the file is rewritten (to a unique temporary file, then renamed
//     over the old one; a symlinked path is written through) with the wider header and the
//     earlier rows padded with empty cells.
//   TensorBoard: one Event per record with a Summary of all its metrics (see tensorboard.h).
// Existing JSONL and CSV files are replaced; the TensorBoard directory gets a new event file.
// Metric names that are not valid UTF-8 get U+FFFD for each invalid byte, in every format. A JSONL
// or CSV file is locked while written: a second logger on it is an error naming the path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tapegrad::observe {

using Scalars = std::vector<std::pair<std::string, double>>;

struct MetricsLoggerOptions {
  std::string jsonl;            // path of a JSON Lines file; empty: none
  std::string csv;              // path of a CSV file; empty: none
  std::string tensorboard_dir;  // directory for a TensorBoard event file; empty: none
};

class MetricsLogger {
 public:
  // Opens every output named in `options` (creating missing parent directories). Throws
  // tapegrad::Error naming the path when a directory cannot be created or a file opened.
  // With no output named, log() does nothing.
  explicit MetricsLogger(const MetricsLoggerOptions& options);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // One record: `scalars` at `step`, stamped with `wall_time` (seconds since the Unix epoch; now
  // when not given). Metric names are non-empty, not "step" or "wall_time", and unique within a
  // record; otherwise tapegrad::Error. A failed write throws tapegrad::Error naming the file.
  // Thread-safe.
  void log(int64_t step, const Scalars& scalars, std::optional<double> wall_time = std::nullopt);
  void log_scalar(const std::string& name, double value, int64_t step) { log(step, {{name, value}}); }

  bool enabled() const;                  // some output is open
  std::string tensorboard_file() const;  // the event file's path, or "" without TensorBoard output
  // Closes every file (the destructor does too); logging afterwards throws.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapegrad::observe
