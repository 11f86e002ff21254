// plot_metrics: turns a MetricsLogger JSON Lines file into an SVG with one panel per metric.
//   plot_metrics run/metrics.jsonl -o curves.svg [--metrics train/loss,valid/bpc] [--title T] [--columns N]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include "metrics_plot.h"

namespace {

const char* kUsage =
    "usage: plot_metrics METRICS.jsonl [-o OUT.svg] [--metrics NAME,NAME,...] [--title TEXT] [--columns N]\n"
    "  Draws every metric of a MetricsLogger JSON Lines file (or the named ones) against the step,\n"
    "  one panel each. Without -o the SVG goes to standard output.\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "plot_metrics: %s\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, metrics;
  tapegrad::tools::MetricsPlotOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (arg == "-o" || arg == "--output") {
      if (!value(output)) return usage_error(arg + " needs a file name");
    } else if (arg == "--metrics") {
      if (!value(metrics)) return usage_error("--metrics needs a list of names");
    } else if (arg == "--title") {
      if (!value(options.title)) return usage_error("--title needs a text");
    } else if (arg == "--columns") {
      std::string n;
      if (!value(n)) return usage_error("--columns needs a number");
      char* end = nullptr;
      const long columns = std::strtol(n.c_str(), &end, 10);
      if (*end != '\0' || columns < 1 || columns > 16) return usage_error("--columns: '" + n + "' is not 1 to 16");
      options.columns = static_cast<int>(columns);
    } else if (!arg.empty() && arg[0] == '-') {
      return usage_error("unknown option " + arg);
    } else if (input.empty()) {
      input = arg;
    } else {
      return usage_error("more than one input file");
    }
  }
  if (input.empty()) return usage_error("no input file");
  try {
    std::vector<tapegrad::tools::MetricSeries> series = tapegrad::tools::read_metrics_jsonl(input);
    if (!metrics.empty()) {
      std::vector<std::string> names;
      std::stringstream list(metrics);
      for (std::string name; std::getline(list, name, ',');)
        if (!name.empty()) names.push_back(name);
      series = tapegrad::tools::select_series(series, names);
    }
    if (series.empty()) throw std::runtime_error("plot_metrics: no metrics in '" + input + "'");
    const std::string svg = tapegrad::tools::render_metrics_svg(series, options);
    if (output.empty()) {
      std::fwrite(svg.data(), 1, svg.size(), stdout);
    } else {
      std::ofstream out(output, std::ios::binary);
      out << svg;
      out.close();
      if (!out) throw std::runtime_error("plot_metrics: cannot write '" + output + "'");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
