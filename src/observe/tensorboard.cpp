// TensorBoard event files: Event protobufs framed as TFRecords (see tensorboard.h).
#include "tapegrad/observe/tensorboard.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>

#include "data/utf8.h"
#include "observe/output_file.h"
#include "observe/protobuf_wire.h"
#include "tapegrad/core/error.h"

namespace tapegrad::observe {
namespace {

constexpr const char* kWho = "TensorBoardWriter";

// Event (event.proto) and Summary (summary.proto) field numbers.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

// A TFRecord: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data; all
// little-endian.
std::string frame_record(const std::string& data) {
  std::string record;
  wire::put_little_endian(record, data.size(), 8);
  wire::put_little_endian(record, mask_crc32c(crc32c(record.data(), 8)), 4);
  record += data;
  wire::put_little_endian(record, mask_crc32c(crc32c(data.data(), data.size())), 4);
  return record;
}

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  wire::put_double(event, kEventWallTime, wall_time);
  wire::put_int64(event, kEventStep, step);
  return event;
}

// PyTorch's SummaryWriter names: events.out.tfevents.<time, 10 digits>.<host>.<pid>.<n>; the
// process-wide n keeps two writers of this process started in the same second apart.
std::string event_file_name() {
  static std::atomic<int> counter{0};
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  for (char* c = host; *c; ++c)
    if (*c == '/') *c = '_';
  char name[400];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.%d",
                static_cast<long long>(std::floor(unix_time_now())), host, static_cast<int>(getpid()), counter++);
  return name;
}

}  // namespace

struct TensorBoardWriter::File {
  OutputFile out;
};

TensorBoardWriter::TensorBoardWriter(const std::string& log_dir) {
  create_directories(kWho, log_dir);
  std::string dir = log_dir;
  if (dir.back() != '/') dir += '/';
  // The name is created exclusively; one taken already (another process with the same host name
  // and pid, as in containers, in the same second) moves on to the next n.
  file_ = std::make_unique<File>();
  for (int attempt = 0; !file_->out.create_new(kWho, dir + event_file_name()); ++attempt)
    TG_CHECK(attempt < 100, kWho, ": cannot find a free event file name in '", log_dir, "' (last tried '",
             file_->out.path(), "')");
  std::string event = event_header(unix_time_now(), 0);
  wire::put_bytes(event, kEventFileVersion, "brain.Event:2");
  file_->out.write(frame_record(event));
}

TensorBoardWriter::~TensorBoardWriter() = default;

const std::string& TensorBoardWriter::path() const {
  return file_->out.path();
}

void TensorBoardWriter::add_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step,
                                    std::optional<double> wall_time) {
  TG_CHECK(file_->out.is_open(), kWho, ".add_scalars: '", file_->out.path(), "' is closed");
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    TG_CHECK(!tag.empty(), kWho, ".add_scalars: an empty tag at step ", step);
    std::string v;
    // A protobuf string must be UTF-8: TensorBoard fails to parse the whole event otherwise.
    wire::put_bytes(v, kValueTag, detail::utf8_replace_invalid(tag));
    wire::put_float(v, kValueSimpleValue, static_cast<float>(value));
    wire::put_bytes(summary, kSummaryValue, v);
  }
  std::string event = event_header(wall_time ? *wall_time : unix_time_now(), step);
  wire::put_bytes(event, kEventSummary, summary);
  file_->out.write(frame_record(event));
}

void TensorBoardWriter::close() {
  file_->out.close();
}

}  // namespace tapegrad::observe
