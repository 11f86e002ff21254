// Reading a MetricsLogger JSON Lines file into one series per metric, and drawing the series as
// an SVG: one panel per metric, x = step, linear axes.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tapegrad::tools {

struct MetricSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value) in file order; null values skipped
};

// Every numeric field other than "step" and "wall_time" becomes (or extends) a series, in order of
// first appearance. Throws std::runtime_error naming the path and line for a line that is not a
// JSON object with a numeric "step".
std::vector<MetricSeries> read_metrics_jsonl(const std::string& path);

// Keeps the series named in `names` (in that order); throws std::runtime_error naming a missing one.
std::vector<MetricSeries> select_series(const std::vector<MetricSeries>& all, const std::vector<std::string>& names);

struct MetricsPlotOptions {
  std::string title;
  int columns = 2;  // panels per row
  int panel_width = 440, panel_height = 260;
};

std::string render_metrics_svg(const std::vector<MetricSeries>& series, const MetricsPlotOptions& options = {});

}  // namespace tapegrad::tools
