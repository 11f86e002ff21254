// Small pieces the example programs share: device choice and timing.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "tapegrad/tapegrad.h"

namespace examples {

// "cpu", "cuda", "cuda:N", or "auto" (the first GPU when one is present, else the CPU).
inline tapegrad::Device pick_device(const std::string& name) {
  if (name == "auto") return tapegrad::cuda::is_available() ? tapegrad::kCUDA : tapegrad::kCPU;
  return tapegrad::Device(name);
}

// Parses the command line. Prints the help and returns nothing for --help; otherwise applies
// --threads (when > 0) and --seed, which every example has.
inline std::optional<cxxopts::ParseResult> parse_command_line(cxxopts::Options& cli, int argc, char** argv) {
  cxxopts::ParseResult args = cli.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return std::nullopt;
  }
  if (args["threads"].as<int>() > 0) tapegrad::set_num_threads(args["threads"].as<int>());
  tapegrad::manual_seed(args["seed"].as<uint64_t>());
  return args;
}

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace examples
