// The examples' metric logging flags: --metrics (JSON Lines), --metrics-csv and --tensorboard,
// turned into one observe::MetricsLogger (which does nothing when no flag is given).
#pragma once

#include <cxxopts.hpp>
#include <memory>
#include <string>

#include "tapegrad/observe/metrics_logger.h"

namespace examples {

inline void add_metrics_options(cxxopts::Options& cli) {
  cli.add_options()("metrics", "write the logged metrics as JSON Lines to this file",
                    cxxopts::value<std::string>()->default_value(""))(
      "metrics-csv", "write the logged metrics as CSV to this file", cxxopts::value<std::string>()->default_value(""))(
      "tensorboard", "write a TensorBoard event file into this directory (tensorboard --logdir DIR)",
      cxxopts::value<std::string>()->default_value(""));
}

inline std::unique_ptr<tapegrad::observe::MetricsLogger> open_metrics(const cxxopts::ParseResult& args) {
  tapegrad::observe::MetricsLoggerOptions options;
  options.jsonl = args["metrics"].as<std::string>();
  options.csv = args["metrics-csv"].as<std::string>();
  options.tensorboard_dir = args["tensorboard"].as<std::string>();
  return std::make_unique<tapegrad::observe::MetricsLogger>(options);
}

}  // namespace examples
