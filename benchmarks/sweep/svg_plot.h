// A small line-plot writer (SVG, no dependencies): log-scaled axes, one polyline per series, an
// optional horizontal reference line, and an optional vertical marker per series (the crossover).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tapegrad::bench {

struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending; y <= 0 points are skipped
  std::optional<double> marker_x;                 // drawn as a dashed vertical line in the series' colour
  std::string marker_label;
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  std::optional<double> reference_y;  // e.g. speed-up 1: where the GPU starts to win
  std::string reference_label;
  int width = 900, height = 560;
};

// Both axes are logarithmic (x in powers of two, y in decades and their 2 and 5 steps).
std::string render_svg(const LinePlot& plot);

}  // namespace tapegrad::bench
