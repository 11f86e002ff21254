// plot_metrics: a MetricsLogger file becomes a well-formed SVG with one series per metric, and
// the program's errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "metrics_plot.h"
#include "tapegrad/observe/metrics_logger.h"

namespace fs = std::filesystem;
using namespace tapegrad;

namespace {

// A small XML well-formedness check: every tag closed in order, attributes quoted, only the five
// predefined entities. Returns "" or what is wrong.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  size_t at = 0;
  bool root_seen = false;
  while (at < xml.size()) {
    if (xml[at] == '&') {
      const size_t end = xml.find(';', at);
      if (end == std::string::npos) return "unterminated entity";
      const std::string entity = xml.substr(at, end - at + 1);
      if (entity != "&lt;" && entity != "&gt;" && entity != "&amp;" && entity != "&quot;" && entity != "&apos;")
        return "unknown entity " + entity;
      at = end + 1;
      continue;
    }
    if (xml[at] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[at]))) return "text outside the root";
      ++at;
      continue;
    }
    const size_t end = xml.find('>', at);
    if (end == std::string::npos) return "unterminated tag";
    std::string tag = xml.substr(at + 1, end - at - 1);
    at = end + 1;
    if (!tag.empty() && tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      open.pop_back();
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n"));
    if (name.empty()) return "empty tag name";
    if (open.empty() && root_seen) return "second root element";
    root_seen = true;
    // Attributes: name="value" pairs.
    std::string rest = tag.substr(name.size());
    size_t i = 0;
    while (true) {
      while (i < rest.size() && std::isspace(static_cast<unsigned char>(rest[i]))) ++i;
      if (i >= rest.size()) break;
      const size_t eq = rest.find('=', i);
      if (eq == std::string::npos || eq + 1 >= rest.size() || rest[eq + 1] != '"')
        return "bad attribute in <" + name + ">";
      const size_t close = rest.find('"', eq + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + name + ">";
      if (rest.substr(eq + 2, close - eq - 2).find('<') != std::string::npos) return "'<' in an attribute";
      i = close + 1;
    }
    if (!self_closing) open.push_back(name);
  }
  if (!root_seen) return "no element";
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

int count(const std::string& text, const std::string& piece) {
  int n = 0;
  for (size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++n;
  return n;
}

class PlotMetrics : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tapegrad_plot_metrics_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    jsonl_ = (dir_ / "metrics.jsonl").string();
    observe::MetricsLoggerOptions options;
    options.jsonl = jsonl_;
    observe::MetricsLogger log(options);
    for (int step = 10; step <= 100; step += 10) log.log(step, {{"train/loss", 2.0 / step}, {"lr", 1e-3}});
    log.log(50, {{"valid/accuracy", 0.8}, {"train/loss", NAN}});  // NaN is written as null: skipped
    log.log(100, {{"valid/accuracy", 0.85}});
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string jsonl_;
};

}  // namespace

TEST(XmlCheck, CatchesBrokenDocuments) {  // negative controls for the checker itself
  EXPECT_EQ(xml_problem("<svg><g a=\"1\"><line/></g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><line x=1/></svg>"), "");
  EXPECT_NE(xml_problem("<svg>a & b</svg>"), "");
  EXPECT_NE(xml_problem("<svg></svg><svg></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>x</text>"), "");
}

TEST_F(PlotMetrics, ReadsOneSeriesPerMetric) {
  std::vector<tools::MetricSeries> series = tools::read_metrics_jsonl(jsonl_);
  ASSERT_EQ(series.size(), 3u);
  EXPECT_EQ(series[0].name, "train/loss");
  EXPECT_EQ(series[1].name, "lr");
  EXPECT_EQ(series[2].name, "valid/accuracy");
  ASSERT_EQ(series[0].points.size(), 10u);  // the null at step 50 is skipped
  EXPECT_EQ(series[0].points[0], (std::pair<double, double>{10, 0.2}));
  EXPECT_EQ(series[2].points, (std::vector<std::pair<double, double>>{{50, 0.8}, {100, 0.85}}));
  EXPECT_EQ(tools::select_series(series, {"valid/accuracy"}).size(), 1u);
  EXPECT_THROW(tools::select_series(series, {"nope"}), std::runtime_error);
}

TEST_F(PlotMetrics, RendersAWellFormedSvgWithEverySeries) {
  tools::MetricsPlotOptions options;
  options.title = "a <run> & its curves";
  const std::string svg = tools::render_metrics_svg(tools::read_metrics_jsonl(jsonl_), options);
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(count(svg, "<polyline class=\"series\""), 3);
  EXPECT_EQ(count(svg, "data-metric=\"train/loss\""), 2);  // the panel and its polyline
  EXPECT_EQ(count(svg, "data-metric=\"valid/accuracy\""), 2);
  EXPECT_NE(svg.find("a &lt;run&gt; &amp; its curves"), std::string::npos);
  // Each polyline has as many points as its series.
  const size_t at = svg.find("<polyline class=\"series\" data-metric=\"valid/accuracy\" points=\"");
  ASSERT_NE(at, std::string::npos);
  const std::string points = svg.substr(at, svg.find("\" fill", at) - at);
  EXPECT_EQ(count(points, ","), 2);
}

TEST_F(PlotMetrics, ProgramWritesTheFileAndReportsErrors) {
  const std::string out = (dir_ / "curves.svg").string();
  const std::string program = PLOT_METRICS_PATH;
  auto run = [](const std::string& command) {
    const int status = std::system((command + " > /dev/null 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(run(program + " " + jsonl_ + " -o " + out + " --metrics train/loss,lr --columns 1"), 0);
  std::ifstream in(out);
  std::stringstream svg;
  svg << in.rdbuf();
  EXPECT_EQ(xml_problem(svg.str()), "");
  EXPECT_EQ(count(svg.str(), "<polyline class=\"series\""), 2);
  EXPECT_EQ(run(program + " " + jsonl_ + " --metrics missing"), 1);
  EXPECT_EQ(run(program + " " + (dir_ / "absent.jsonl").string()), 1);
  EXPECT_EQ(run(program + " --bogus"), 2);
  EXPECT_EQ(run(program), 2);
  std::ofstream(dir_ / "bad.jsonl") << "{\"step\": 1, \"loss\": 2}\nnot json\n";
  EXPECT_EQ(run(program + " " + (dir_ / "bad.jsonl").string()), 1);
  EXPECT_THROW(tools::read_metrics_jsonl((dir_ / "bad.jsonl").string()), std::runtime_error);
}
