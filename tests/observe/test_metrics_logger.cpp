// observe::MetricsLogger and TensorBoardWriter: CRC-32C against its check value, the event file
// read back by an independent TFRecord + protobuf reader (with a corrupted-byte control), JSON
// Lines and CSV round trips, and errors for unusable paths.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "support/tfrecord_reader.h"
#include "tapegrad/observe/metrics_logger.h"
#include "tapegrad/observe/tensorboard.h"

using namespace tapegrad;
using tapegrad::testing::expect_error;
using namespace tapegrad::testing::tfrecord;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("tapegrad_metrics_" + std::to_string(getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TEST(Crc32c, StandardCheckValueAndMask) {
  EXPECT_EQ(observe::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_bitwise("123456789"), 0xE3069283u);  // the test's own reader agrees
  EXPECT_EQ(observe::crc32c("", 0), 0u);
  // Continuing a CRC over a split buffer gives the CRC of the whole.
  EXPECT_EQ(observe::crc32c("56789", 5, observe::crc32c("1234", 4)), 0xE3069283u);
  // The mask: rotate right by 15, add 0xa282ead8 (mod 2^32), worked out by hand for the check value.
  const uint32_t rotated = (0xE3069283u >> 15) | (0xE3069283u << 17);
  EXPECT_EQ(rotated, 0x2507C60Du);
  EXPECT_EQ(observe::mask_crc32c(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(observe::mask_crc32c(0xE3069283u), masked(0xE3069283u));
}

TEST(TensorBoard, EventFileReadsBack) {
  TempDir dir;
  std::string path;
  {
    observe::TensorBoardWriter tb(dir / "run");
    path = tb.path();
    tb.add_scalar("train/loss", 2.5, 10, 1000.25);
    tb.add_scalars({{"train/loss", 1.25}, {"lr", 1e-3}}, 20, 1001.5);
    tb.add_scalar("neg", -3.0, -1, 1002.0);  // negative steps are ten-byte varints
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir / "run"));
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.5e9);  // now, as a Unix time
  EXPECT_TRUE(events[0].values.empty());
  EXPECT_EQ(events[1].step, 10);
  EXPECT_EQ(events[1].wall_time, 1000.25);
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].first, "train/loss");
  EXPECT_EQ(events[1].values[0].second, 2.5f);
  EXPECT_EQ(events[2].step, 20);
  ASSERT_EQ(events[2].values.size(), 2u);
  EXPECT_EQ(events[2].values[1].first, "lr");
  EXPECT_EQ(events[2].values[1].second, 1e-3f);
  EXPECT_EQ(events[3].step, -1);
  EXPECT_EQ(events[3].values[0].second, -3.0f);
}

TEST(TensorBoard, ReaderDetectsAFlippedByte) {
  TempDir dir;
  std::string path;
  {
    observe::TensorBoardWriter tb(dir.path().string());
    path = tb.path();
    tb.add_scalar("loss", 0.5, 1);
  }
  const std::string good = read_file(path);
  ASSERT_NO_THROW(read_records(good));
  // Flip one bit in each region: the length, its CRC, the data, the data's CRC (second record).
  const size_t second = read_records(good)[0].size() + 16;
  for (size_t offset : {size_t{0}, size_t{9}, size_t{14}, second + 3, second + 14, good.size() - 1}) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x10);
    EXPECT_THROW(read_records(bad), std::runtime_error) << "flipped byte at " << offset;
  }
}

TEST(TensorBoard, EveryRecordIsOnDiskBeforeClose) {
  TempDir dir;
  observe::TensorBoardWriter tb(dir.path().string());
  tb.add_scalar("loss", 0.5, 1);
  tb.add_scalar("loss", 0.25, 2);
  std::vector<Event> events = read_events(tb.path());  // still open: nothing waits in a buffer
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].values[0].second, 0.25f);
  tb.close();
  expect_error([&] { tb.add_scalar("loss", 0.1, 3); }, {"TensorBoardWriter", "closed"});
}

TEST(MetricsLogger, JsonlRoundTrip) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.jsonl = dir / "logs/nested/metrics.jsonl";  // parent directories are created
  {
    observe::MetricsLogger log(options);
    EXPECT_TRUE(log.enabled());
    log.log(100, {{"train/loss", 0.1}, {"lr", 1e-3}}, 1764625870.25);
    log.log(200, {{"train/loss", 1.0 / 3.0}, {"odd \"name\"", NAN}}, 1764625871.5);
    // Readable while the run goes on.
    EXPECT_EQ(std::count(std::istreambuf_iterator<char>(*std::make_unique<std::ifstream>(options.jsonl)), {}, '\n'), 2);
  }
  std::ifstream in(options.jsonl);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 100);
  EXPECT_EQ(lines[0]["wall_time"].get<double>(), 1764625870.25);
  EXPECT_EQ(lines[0]["train/loss"].get<double>(), 0.1);  // shortest round-trip text: exact
  EXPECT_EQ(lines[0]["lr"].get<double>(), 1e-3);
  EXPECT_EQ(lines[1]["train/loss"].get<double>(), 1.0 / 3.0);
  EXPECT_TRUE(lines[1]["odd \"name\""].is_null());  // NaN has no JSON form
  // The order of the metrics is kept.
  EXPECT_EQ(read_file(options.jsonl).substr(0, 52), "{\"step\": 100, \"wall_time\": 1764625870.25, \"train/los");
}

namespace {
std::vector<std::vector<std::string>> csv_rows(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      char c = line[i];
      if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        cell += '"', ++i;
      else if (c == '"')
        quoted = !quoted;
      else if (c == ',' && !quoted)
        cells.push_back(cell), cell.clear();
      else
        cell += c;
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}
}  // namespace

TEST(MetricsLogger, CsvRoundTripAndLateMetric) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.csv = dir / "metrics.csv";
  observe::MetricsLogger log(options);
  log.log(1, {{"loss", 0.5}, {"lr", 0.01}}, 10.0);
  log.log(2, {{"loss", 0.25}}, 11.0);
  // A metric seen for the first time adds a column; earlier rows get empty cells.
  log.log(2, {{"valid, acc", 0.75}, {"loss", 0.2}}, 12.0);
  log.log(3, {{"loss", INFINITY}}, 13.0);
  auto rows = csv_rows(options.csv);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"step", "wall_time", "loss", "lr", "valid, acc"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"1", "10", "0.5", "0.01", ""}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"2", "11", "0.25", "", ""}));
  EXPECT_EQ(rows[3], (std::vector<std::string>{"2", "12", "0.2", "", "0.75"}));
  EXPECT_EQ(rows[4], (std::vector<std::string>{"3", "13", "inf", "", ""}));
  EXPECT_FALSE(fs::exists(options.csv + ".tmp"));
  // Negative control for the reader: a header with a quoted comma is one cell, not two.
  EXPECT_EQ(rows[0].size(), 5u);
}

TEST(MetricsLogger, AllThreeOutputsTogether) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.jsonl = dir / "m.jsonl";
  options.csv = dir / "m.csv";
  options.tensorboard_dir = dir / "tb";
  observe::MetricsLogger log(options);
  for (int step = 1; step <= 3; ++step) log.log(step, {{"loss", 1.0 / step}});
  log.log_scalar("epoch/accuracy", 0.9, 3);
  log.close();
  std::vector<Event> events = read_events(log.tensorboard_file());
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[3].step, 3);
  EXPECT_EQ(events[3].values[0].second, 1.0f / 3.0f);
  EXPECT_EQ(events[4].values[0].first, "epoch/accuracy");
  EXPECT_EQ(csv_rows(options.csv).size(), 5u);
  EXPECT_EQ(csv_rows(options.jsonl).size(), 4u);
  expect_error([&] { log.log(4, {{"loss", 0.1}}); }, {"MetricsLogger", "closed"});
}

TEST(MetricsLogger, DisabledLoggerDoesNothing) {
  observe::MetricsLogger log({});
  EXPECT_FALSE(log.enabled());
  EXPECT_EQ(log.tensorboard_file(), "");
  log.log(1, {{"loss", 1.0}});
}

TEST(MetricsLogger, BadNamesAreErrors) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.jsonl = dir / "m.jsonl";
  observe::MetricsLogger log(options);
  expect_error([&] { log.log(1, {{"", 1.0}}); }, {"MetricsLogger", "empty metric name"});
  expect_error([&] { log.log(1, {{"step", 1.0}}); }, {"MetricsLogger", "'step'", "reserved"});
  expect_error([&] { log.log(1, {{"a", 1.0}, {"a", 2.0}}); }, {"MetricsLogger", "'a'", "twice"});
  expect_error([&] { log.log(1, {{"a\nb", 1.0}}); }, {"MetricsLogger", "line break"});
}

TEST(MetricsLogger, UnusablePathsNameThePath) {
  TempDir dir;
  const std::string file = dir / "plain_file";
  std::ofstream(file) << "x";
  observe::MetricsLoggerOptions options;
  options.tensorboard_dir = file + "/tb";  // a directory below a regular file
  expect_error([&] { observe::MetricsLogger log(options); },
               {"TensorBoardWriter", "cannot create the directory", file});
  options = {};
  options.tensorboard_dir = file;  // exists, but not a directory
  expect_error([&] { observe::MetricsLogger log(options); }, {"TensorBoardWriter", file, "directory"});
  options = {};
  options.jsonl = file + "/m.jsonl";
  expect_error([&] { observe::MetricsLogger log(options); }, {"MetricsLogger", "cannot create the directory", file});
  options = {};
  options.csv = dir.path().string();  // a directory where a file should be
  expect_error([&] { observe::MetricsLogger log(options); }, {"MetricsLogger", "cannot open", dir.path().string()});
  if (geteuid() != 0) {  // root may write anywhere
    fs::create_directories(dir / "readonly");
    fs::permissions(dir / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
    options = {};
    options.jsonl = dir / "readonly/m.jsonl";
    expect_error([&] { observe::MetricsLogger log(options); }, {"MetricsLogger", "cannot open", "readonly/m.jsonl"});
    fs::permissions(dir / "readonly", fs::perms::owner_all);
  }
}

// Hardening: output files. A symlink planted at the CSV's old fixed temporary name was followed
// and truncated when a late metric widened the file.
TEST(MetricsLogger, CsvWidenIgnoresAPlantedTemporarySymlink) {
  TempDir dir;
  const std::string victim = dir / "victim.txt";
  std::ofstream(victim) << "precious";
  observe::MetricsLoggerOptions options;
  options.csv = dir / "m.csv";
  fs::create_symlink(victim, options.csv + ".tmp");
  observe::MetricsLogger log(options);
  log.log(1, {{"loss", 0.5}}, 10.0);
  log.log(2, {{"loss", 0.25}, {"acc", 0.5}}, 11.0);  // a new column: the file is rewritten
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(options.csv + ".tmp"));
  EXPECT_EQ(csv_rows(options.csv).size(), 3u);
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 3u);  // no temporary left behind
}

// A CSV path that is a symlink is written through: the link stays, its target gets the rows.
TEST(MetricsLogger, CsvThroughASymlinkStaysALink) {
  TempDir dir;
  fs::create_directories(dir / "real");
  const std::string target = dir / "real/m.csv", link = dir / "m.csv";
  fs::create_symlink("real/m.csv", link);  // relative to the link's directory
  observe::MetricsLoggerOptions options;
  options.csv = link;
  observe::MetricsLogger log(options);
  log.log(1, {{"loss", 0.5}}, 10.0);
  log.log(2, {{"loss", 0.25}, {"acc", 0.5}}, 11.0);
  log.close();
  EXPECT_TRUE(fs::is_symlink(link));
  auto rows = csv_rows(target);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"step", "wall_time", "loss", "acc"}));
}

// A CSV that is a pipe cannot be rewritten: it stays a pipe and gets the wider header as a line.
TEST(MetricsLogger, CsvToAPipeIsNotReplaced) {
  TempDir dir;
  const std::string fifo = dir / "m.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  {
    observe::MetricsLoggerOptions options;
    options.csv = fifo;
    observe::MetricsLogger log(options);
    log.log(1, {{"loss", 0.5}}, 10.0);
    log.log(2, {{"acc", 0.5}}, 11.0);
  }
  EXPECT_TRUE(fs::is_fifo(fifo));
  char buffer[256];
  const ssize_t n = ::read(reader, buffer, sizeof buffer);
  ::close(reader);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buffer, size_t(n)),
            "step,wall_time\nstep,wall_time,loss\n1,10,0.5\nstep,wall_time,loss,acc\n2,11,,0.5\n");
}

// NaN and infinities, in values and in a given wall time, stay valid JSON (null); the CSV has
// nan, inf, -inf.
TEST(MetricsLogger, NonFiniteNumbersAreNullInJson) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.jsonl = dir / "m.jsonl";
  options.csv = dir / "m.csv";
  {
    observe::MetricsLogger log(options);
    log.log(std::numeric_limits<int64_t>::max(), {{"a", INFINITY}, {"b", -INFINITY}, {"c", NAN}}, NAN);
  }
  const nlohmann::json record = nlohmann::json::parse(read_file(options.jsonl));
  EXPECT_EQ(record["step"].get<int64_t>(), std::numeric_limits<int64_t>::max());
  for (const char* key : {"wall_time", "a", "b", "c"}) EXPECT_TRUE(record[key].is_null()) << key;
  EXPECT_EQ(csv_rows(options.csv)[1], (std::vector<std::string>{"9223372036854775807", "nan", "inf", "-inf", "nan"}));
}

// Metric names with invalid UTF-8 (each bad byte becomes U+FFFD), control characters and quotes
// give valid JSON, a readable CSV header and TensorBoard tags that are valid protobuf strings.
TEST(MetricsLogger, OddNamesStayValidInEveryFormat) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.jsonl = dir / "m.jsonl";
  options.csv = dir / "m.csv";
  options.tensorboard_dir = dir / "tb";
  const std::string bad = "loss\xff\xfe", tab = "a\tb \"q\" \\ \x01";
  std::string tb_file;
  {
    observe::MetricsLogger log(options);
    log.log(1, {{bad, 1.0}, {tab, 2.0}, {std::string(5000, 'x'), 3.0}});
    tb_file = log.tensorboard_file();
  }
  const std::string fixed = "loss\xEF\xBF\xBD\xEF\xBF\xBD";
  const nlohmann::json record = nlohmann::json::parse(read_file(options.jsonl));  // throws on invalid UTF-8
  EXPECT_EQ(record[fixed].get<double>(), 1.0);
  EXPECT_EQ(record[tab].get<double>(), 2.0);
  EXPECT_EQ(csv_rows(options.csv)[0][2], fixed);
  std::vector<Event> events = read_events(tb_file);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].values[0].first, fixed);
  EXPECT_EQ(events[1].values[2].first.size(), 5000u);
  // Two names that differ only in invalid bytes are one name.
  observe::MetricsLogger log(observe::MetricsLoggerOptions{});
  expect_error([&] { log.log(1, {{"a\xff", 1.0}, {"a\xfe", 2.0}}); }, {"MetricsLogger", "twice"});
}

TEST(TensorBoard, InvalidUtf8TagIsReplaced) {
  TempDir dir;
  observe::TensorBoardWriter tb(dir.path().string());
  tb.add_scalar("x\x80y", 1.0, 1);
  EXPECT_EQ(read_events(tb.path())[1].values[0].first, "x\xEF\xBF\xBDy");
}

// Two loggers (or two outputs of one) writing one file overwrote each other's records.
TEST(MetricsLogger, OneFileForTwoWritersIsAnError) {
  TempDir dir;
  observe::MetricsLoggerOptions options;
  options.jsonl = dir / "m.jsonl";
  observe::MetricsLogger first(options);
  expect_error([&] { observe::MetricsLogger second(options); }, {"MetricsLogger", options.jsonl, "another logger"});
  options.csv = options.jsonl;
  options.jsonl = dir / "other.jsonl";
  expect_error([&] { observe::MetricsLogger second(options); }, {"MetricsLogger", "another logger"});
  first.log(1, {{"loss", 1.0}});
  first.close();
  observe::MetricsLogger third(observe::MetricsLoggerOptions{dir / "m.jsonl", "", ""});  // free again after close
  // /dev/full: the failed write is an error naming the file.
  observe::MetricsLogger full(observe::MetricsLoggerOptions{"/dev/full", "", ""});
  expect_error([&] { full.log(1, {{"loss", 1.0}}); }, {"MetricsLogger", "/dev/full"});
}

// An event file name already taken (another process with the same host name and pid, as in
// containers, in the same second) moves on to the next name instead of failing.
TEST(TensorBoard, TakenEventFileNameMovesOn) {
  TempDir dir;
  std::string first_path;
  {
    observe::TensorBoardWriter first(dir.path().string());
    first_path = first.path();
  }
  // The next writer's name ends in n + 1; plant it for this second and the next two.
  const size_t dot = first_path.rfind('.');
  const int n = std::stoi(first_path.substr(dot + 1));
  const std::string rest = first_path.substr(first_path.find('.', first_path.rfind("tfevents.") + 9));
  const long long now = std::stoll(first_path.substr(first_path.rfind("tfevents.") + 9, 10));
  for (long long t = now; t <= now + 2; ++t) {
    char stamp[16];
    std::snprintf(stamp, sizeof stamp, "%010lld", t);
    const std::string planted = dir / ("events.out.tfevents." + std::string(stamp) + rest.substr(0, rest.rfind('.')) +
                                       "." + std::to_string(n + 1));
    std::ofstream(planted) << "other";
  }
  observe::TensorBoardWriter second(dir.path().string());
  EXPECT_EQ(read_events(second.path()).size(), 1u);
}
