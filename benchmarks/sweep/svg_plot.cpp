// SVG rendering of a log-log line plot.
#include "svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tapegrad::bench {

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
  char buf[32];
  if (v >= 1000 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (v >= 0.1)
    std::snprintf(buf, sizeof buf, "%.2g", v);
  else
    std::snprintf(buf, sizeof buf, "%.1g", v);
  return buf;
}

// Maps a value on a log axis [lo, hi] to pixels [p0, p1].
struct LogAxis {
  double lo, hi, p0, p1;
  double operator()(double v) const {
    return p0 + (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) * (p1 - p0);
  }
};

}  // namespace

std::string render_svg(const LinePlot& plot) {
  const double left = 80, right = 230, top = 50, bottom = 60;  // legend sits on the right
  const double w = plot.width, h = plot.height;

  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  for (const PlotSeries& s : plot.series) {
    for (auto [x, y] : s.points) {
      if (x <= 0 || y <= 0) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  }
  if (plot.reference_y) ymin = std::min(ymin, *plot.reference_y), ymax = std::max(ymax, *plot.reference_y);
  if (xmax == 0) xmin = 1, xmax = 2, ymin = 1, ymax = 10;  // nothing to draw: an empty frame
  xmin = std::exp2(std::floor(std::log2(xmin))), xmax = std::exp2(std::ceil(std::log2(xmax)));
  if (xmax <= xmin) xmax = xmin * 2;
  ymin = std::pow(10, std::floor(std::log10(ymin))), ymax = std::pow(10, std::ceil(std::log10(ymax)));
  if (ymax <= ymin) ymax = ymin * 10;
  LogAxis ax{xmin, xmax, left, w - right}, ay{ymin, ymax, h - bottom, top};

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << w / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << escape(plot.title)
      << "</text>\n";

  // Grid and tick labels: x at powers of two, y at 1, 2, 5 per decade.
  for (double x = xmin; x <= xmax * 1.0001; x *= 2) {
    svg << "<line x1=\"" << ax(x) << "\" y1=\"" << top << "\" x2=\"" << ax(x) << "\" y2=\"" << h - bottom
        << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << ax(x) << "\" y=\"" << h - bottom + 16 << "\" text-anchor=\"middle\">" << number(x)
        << "</text>\n";
  }
  for (double decade = ymin; decade < ymax * 1.0001; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      double y = decade * m;
      if (y > ymax * 1.0001) break;
      svg << "<line x1=\"" << left << "\" y1=\"" << ay(y) << "\" x2=\"" << w - right << "\" y2=\"" << ay(y)
          << "\" stroke=\"" << (m == 1.0 ? "#d0d0d0" : "#f0f0f0") << "\"/>\n";
      svg << "<text x=\"" << left - 6 << "\" y=\"" << ay(y) + 4 << "\" text-anchor=\"end\">" << number(y)
          << "</text>\n";
    }
  }
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << w - right - left << "\" height=\""
      << h - bottom - top << "\" fill=\"none\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 18 << "\" text-anchor=\"middle\">"
      << escape(plot.x_label) << "</text>\n";
  svg << "<text transform=\"translate(20," << (top + h - bottom) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape(plot.y_label) << "</text>\n";

  if (plot.reference_y) {
    double y = ay(*plot.reference_y);
    svg << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << w - right << "\" y2=\"" << y
        << "\" stroke=\"black\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
    svg << "<text x=\"" << left + 6 << "\" y=\"" << y - 6 << "\">" << escape(plot.reference_label) << "</text>\n";
  }

  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    const char* colour = kColours[i % (sizeof kColours / sizeof kColours[0])];
    std::ostringstream path;
    for (auto [x, y] : s.points) {
      if (x <= 0 || y <= 0) continue;
      path << ax(x) << "," << ay(y) << " ";
      svg << "<circle cx=\"" << ax(x) << "\" cy=\"" << ay(y) << "\" r=\"3\" fill=\"" << colour << "\"/>\n";
    }
    svg << "<polyline points=\"" << path.str() << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
    if (s.marker_x && *s.marker_x >= xmin && *s.marker_x <= xmax) {
      double x = ax(*s.marker_x);
      svg << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << h - bottom << "\" stroke=\""
          << colour << "\" stroke-dasharray=\"3,3\"/>\n";
      if (plot.reference_y) {  // the crossing itself, on the reference line
        svg << "<circle cx=\"" << x << "\" cy=\"" << ay(*plot.reference_y) << "\" r=\"6\" fill=\"none\" stroke=\""
            << colour << "\" stroke-width=\"2\"/>\n";
      }
      svg << "<text x=\"" << x + 3 << "\" y=\"" << top + 14 + 14 * static_cast<double>(i) << "\" fill=\"" << colour
          << "\">" << escape(s.marker_label) << "</text>\n";
    }
    double ly = top + 10 + 18 * static_cast<double>(i);
    svg << "<line x1=\"" << w - right + 12 << "\" y1=\"" << ly << "\" x2=\"" << w - right + 36 << "\" y2=\"" << ly
        << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
    svg << "<text x=\"" << w - right + 42 << "\" y=\"" << ly + 4 << "\">" << escape(s.label) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace tapegrad::bench
