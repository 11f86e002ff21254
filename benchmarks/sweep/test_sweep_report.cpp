// The sweep's crossover rule and its writers, on made-up measurements (no GPU needed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "sweep/svg_plot.h"
#include "sweep/sweep_report.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

// A curve whose GPU takes `gpu_ms` and CPU `cpu_ms` at each batch (NaN: the GPU run failed).
CurveResult curve(const std::vector<int64_t>& batches, const std::vector<double>& cpu_ms,
                  const std::vector<double>& gpu_ms) {
  CurveResult r{{"test", ModelShape::mlp({8, 4, 2}), batches}, {}};
  for (size_t i = 0; i < batches.size(); ++i) {
    SweepPoint p;
    p.batch = batches[i];
    p.cpu.median_ms = cpu_ms[i];
    if (!std::isnan(gpu_ms[i])) {
      p.gpu = StepTiming{};
      p.gpu->median_ms = gpu_ms[i];
    }
    r.points.push_back(p);
  }
  return r;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(Crossover, InterpolatesBetweenTheLastLossAndTheFirstWin) {
  // Speed-ups 0.25, 0.5, 2, 4: crosses 1 halfway (in log terms) between batch 4 and batch 16.
  Crossover c = find_crossover(curve({1, 4, 16, 64}, {1, 2, 8, 16}, {4, 4, 4, 4}));
  ASSERT_EQ(c.kind, Crossover::Kind::At);
  EXPECT_EQ(c.first_winning_batch, 16);
  EXPECT_NEAR(c.interpolated_batch, 8.0, 1e-9);
  EXPECT_NE(c.describe().find("batch 16"), std::string::npos);
}

TEST(Crossover, AWinBeforeALossDoesNotCount) {
  // The GPU wins at 4, loses at 16, then wins from 64 on: the crossover is 64.
  Crossover c = find_crossover(curve({1, 4, 16, 64, 256}, {1, 3, 1, 4, 8}, {2, 2, 2, 2, 2}));
  ASSERT_EQ(c.kind, Crossover::Kind::At);
  EXPECT_EQ(c.first_winning_batch, 64);
}

TEST(Crossover, NeverAlwaysAndNoData) {
  EXPECT_EQ(find_crossover(curve({1, 8}, {1, 1}, {2, 2})).kind, Crossover::Kind::Never);
  Crossover always = find_crossover(curve({1, 8}, {3, 3}, {2, 2}));
  EXPECT_EQ(always.kind, Crossover::Kind::FromSmallest);
  EXPECT_EQ(always.first_winning_batch, 1);
  EXPECT_EQ(find_crossover(curve({1, 8}, {1, 1}, {NAN, NAN})).kind, Crossover::Kind::NoGpuData);
  // A failed GPU point is skipped, not read as a loss.
  EXPECT_EQ(find_crossover(curve({1, 8, 64}, {1, 1, 9}, {2, NAN, 3})).first_winning_batch, 64);
}

TEST(SweepReport, WritesCsvJsonAndAPlotWithTheCrossoverMarked) {
  SweepReport report;
  report.gpu_found = true;
  report.curves.push_back(curve({1, 4, 16, 64}, {1, 2, 8, 16}, {4, 4, 4, 4}));
  report.curves[0].points[2].copy_pageable_ms = 0.05;
  const std::string dir = ::testing::TempDir();
  write_csv(report, dir + "/sweep.csv");
  write_json(report, dir + "/sweep.json");
  write_plot(report, dir + "/speedup.svg");

  std::string csv = read(dir + "/sweep.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);  // header + 4 points
  EXPECT_NE(csv.find("test,mlp 8-4-2,mlp,8,4,0,16,8,"), std::string::npos) << csv;
  std::string json = read(dir + "/sweep.json");
  EXPECT_NE(json.find("\"first_winning_batch\": 16"), std::string::npos) << json;
  EXPECT_NE(json.find("\"h2d_pageable_ms\": 0.05"), std::string::npos);
  std::string svg = read(dir + "/speedup.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("test: crossover ~8"), std::string::npos);  // the crossover label
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  std::string table = format_table(report);
  EXPECT_NE(table.find("crossover: the GPU wins from batch 16"), std::string::npos) << table;
  for (const char* file : {"/sweep.csv", "/sweep.json", "/speedup.svg"}) std::remove((dir + file).c_str());
}

TEST(SvgPlot, EscapesTextAndSurvivesAnEmptyPlot) {
  LinePlot plot;
  plot.title = "a < b & c";
  std::string svg = render_svg(plot);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}
