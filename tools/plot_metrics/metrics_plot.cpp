// plot_metrics' reading and drawing. The sweep's plotter (benchmarks/sweep/svg_plot) draws one
// log-log panel; training curves want linear axes and a panel per metric, so this is its own
// small renderer.
#include "metrics_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace tapegrad::tools {
namespace {

const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                          "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", v);
  return buffer;
}

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double raw = (hi - lo) / target, magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

// A value range with some room, never empty.
std::pair<double, double> padded_range(double lo, double hi) {
  if (hi <= lo) {
    const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    return {lo - d, hi + d};
  }
  const double d = (hi - lo) * 0.05;
  return {lo - d, hi + d};
}

}  // namespace

std::vector<MetricSeries> read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("plot_metrics: cannot open '" + path + "'");
  std::vector<MetricSeries> series;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_number);
    nlohmann::ordered_json record;  // keeps the file's order of metrics
    try {
      record = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("plot_metrics: " + where + " is not JSON: " + e.what());
    }
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number())
      throw std::runtime_error("plot_metrics: " + where + " is not an object with a numeric \"step\"");
    const double step = record["step"].get<double>();
    for (const auto& [key, value] : record.items()) {
      if (key == "step" || key == "wall_time" || !value.is_number()) continue;
      auto it = std::find_if(series.begin(), series.end(), [&, k = key](const MetricSeries& s) { return s.name == k; });
      if (it == series.end()) it = series.insert(series.end(), MetricSeries{key, {}});
      it->points.emplace_back(step, value.get<double>());
    }
  }
  return series;
}

std::vector<MetricSeries> select_series(const std::vector<MetricSeries>& all, const std::vector<std::string>& names) {
  std::vector<MetricSeries> out;
  for (const std::string& name : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const MetricSeries& s) { return s.name == name; });
    if (it == all.end()) {
      std::string known;
      for (const MetricSeries& s : all) known += (known.empty() ? "" : ", ") + s.name;
      throw std::runtime_error("plot_metrics: no metric '" + name + "' in the file (it has: " + known + ")");
    }
    out.push_back(*it);
  }
  return out;
}

std::string render_metrics_svg(const std::vector<MetricSeries>& series, const MetricsPlotOptions& options) {
  const int columns = std::max(1, options.columns);
  const int panels = static_cast<int>(series.size()), rows = std::max(1, (panels + columns - 1) / columns);
  const double pw = options.panel_width, ph = options.panel_height, title_h = options.title.empty() ? 10 : 40;
  const double width = pw * std::min(columns, std::max(panels, 1)), height = title_h + ph * rows;
  const double left = 64, right = 16, top = 30, bottom = 40;  // inside each panel

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!options.title.empty())
    svg << "<text x=\"" << width / 2 << "\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" << escape(options.title)
        << "</text>\n";

  for (int i = 0; i < panels; ++i) {
    const MetricSeries& s = series[static_cast<size_t>(i)];
    const char* colour = kColours[i % (sizeof kColours / sizeof kColours[0])];
    const double x0 = pw * (i % columns), y0 = title_h + ph * (i / columns);
    const double px0 = x0 + left, px1 = x0 + pw - right, py0 = y0 + top, py1 = y0 + ph - bottom;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
    if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmax <= xmin) xmax = xmin + 1;
    std::tie(ymin, ymax) = padded_range(ymin, ymax);
    auto px = [&](double x) { return px0 + (x - xmin) / (xmax - xmin) * (px1 - px0); };
    auto py = [&](double y) { return py1 - (y - ymin) / (ymax - ymin) * (py1 - py0); };

    svg << "<g class=\"panel\" data-metric=\"" << escape(s.name) << "\">\n";
    svg << "<text x=\"" << (px0 + px1) / 2 << "\" y=\"" << y0 + 18 << "\" text-anchor=\"middle\" font-size=\"13\">"
        << escape(s.name) << "</text>\n";
    for (double t : nice_ticks(xmin, xmax, 5)) {
      svg << "<line x1=\"" << px(t) << "\" y1=\"" << py0 << "\" x2=\"" << px(t) << "\" y2=\"" << py1
          << "\" stroke=\"#e5e5e5\"/>\n";
      svg << "<text x=\"" << px(t) << "\" y=\"" << py1 + 14 << "\" text-anchor=\"middle\">" << number(t) << "</text>\n";
    }
    for (double t : nice_ticks(ymin, ymax, 4)) {
      svg << "<line x1=\"" << px0 << "\" y1=\"" << py(t) << "\" x2=\"" << px1 << "\" y2=\"" << py(t)
          << "\" stroke=\"#e5e5e5\"/>\n";
      svg << "<text x=\"" << px0 - 5 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">" << number(t) << "</text>\n";
    }
    svg << "<rect x=\"" << px0 << "\" y=\"" << py0 << "\" width=\"" << px1 - px0 << "\" height=\"" << py1 - py0
        << "\" fill=\"none\" stroke=\"black\"/>\n";
    svg << "<text x=\"" << (px0 + px1) / 2 << "\" y=\"" << py1 + 30 << "\" text-anchor=\"middle\">step</text>\n";
    std::ostringstream points;
    for (auto [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) points << px(x) << "," << py(y) << " ";
    svg << "<polyline class=\"series\" data-metric=\"" << escape(s.name) << "\" points=\"" << points.str()
        << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.8\"/>\n";
    if (s.points.size() <= 40)  // few points (per-epoch metrics): mark each one
      for (auto [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"2.5\" fill=\"" << colour << "\"/>\n";
    svg << "</g>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace tapegrad::tools
