// TensorBoardWriter: scalar summaries in a TensorBoard event file (what `tensorboard --logdir DIR`
// reads), written without protobuf or TensorFlow. The file is a sequence of TFRecords (length,
// masked CRC-32C of the length, an Event protobuf, masked CRC-32C of the data); the first Event
// carries file_version "brain.Event:2", every later one a Summary of {tag, simple_value} pairs.
//
//   observe::TensorBoardWriter tb("runs/mlp");
//   tb.add_scalar("train/loss", 0.53, /*step=*/100);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tapegrad::observe {

// CRC-32C (Castagnoli polynomial, reflected, as in iSCSI and TFRecord); `crc` continues an
// earlier value. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);

class TensorBoardWriter {
 public:
  // Creates `log_dir` (with its parents) and a new file events.out.tfevents.<unix time>.<host>.<pid>.<n>
  // in it, and writes the file_version record. Throws tapegrad::Error naming the path when the
  // directory cannot be created or the file cannot be written.
  explicit TensorBoardWriter(const std::string& log_dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` holding every (tag, value) pair (values are stored as float, TensorBoard's
  // simple_value). wall_time: seconds since the Unix epoch, now when not given. Each call is one
  // write to the file, so a running training can be watched and a crash loses at most this record.
  void add_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step,
                   std::optional<double> wall_time = std::nullopt);
  void add_scalar(const std::string& tag, double value, int64_t step, std::optional<double> wall_time = std::nullopt) {
    add_scalars({{tag, value}}, step, wall_time);
  }
  const std::string& path() const;
  // Closes the file (the destructor does too); adding after close() throws.
  void close();

 private:
  struct File;
  std::unique_ptr<File> file_;
};

}  // namespace tapegrad::observe
