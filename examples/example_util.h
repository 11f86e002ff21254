// Small pieces the example programs share: the command line, device choice, the error exit and
// timing.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cxxopts.hpp>
#include <exception>
#include <optional>
#include <string>

#include "cli_values.h"
#include "tapegrad/tapegrad.h"

namespace examples {

// "cpu", "cuda", "cuda:N", or "auto" (the first GPU when one is present, else the CPU).
inline tapegrad::Device pick_device(const std::string& name) {
  if (name == "auto") return tapegrad::cuda::is_available() ? tapegrad::kCUDA : tapegrad::kCPU;
  return tapegrad::Device(name);
}

// The most threads --threads accepts.
constexpr int64_t kMaxThreads = 4096;

// Parses the command line. Prints the help and returns nothing for --help; otherwise rejects
// unknown flags and stray arguments (UsageError) and applies --threads (when > 0) and --seed,
// which every example has. Every flag is declared as a string and read through cli_values.h.
inline std::optional<cxxopts::ParseResult> parse_command_line(cxxopts::Options& cli, int argc, char** argv) {
  cxxopts::ParseResult args = [&] {
    try {
      return cli.parse(argc, argv);
    } catch (const cxxopts::exceptions::exception& e) {
      throw UsageError(e.what());
    }
  }();
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return std::nullopt;
  }
  reject_positional(args);
  if (int64_t threads = int_flag(args, "threads", 0, kMaxThreads); threads > 0)
    tapegrad::set_num_threads(static_cast<int>(threads));
  tapegrad::manual_seed(uint64_flag(args, "seed"));
  return args;
}

// Runs an example's body: a UsageError exits with status 2, any other error with status 1, both
// with one line "program: message" on stderr.
template <class Body>
int run_example(const char* program, Body&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

// Throws tapegrad::Error when a loss is NaN or infinite: training cannot recover, and a checkpoint
// saved now would replace the last good one with a broken model.
inline void check_finite_loss(double loss, const std::string& where) {
  if (!std::isfinite(loss))
    throw tapegrad::Error("the loss became " + std::to_string(loss) + " at " + where +
                          "; stopping (a lower --lr may help; no checkpoint was written for this epoch)");
}

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Prints "\r[=====>    ] 123/938 1234 img/s ETA 12s" on a terminal; nothing otherwise. `unit` names
// what update() counts.
class Progress {
 public:
  explicit Progress(int64_t total, const char* unit = "img/s")
      : total_(total), unit_(unit), tty_(isatty(fileno(stdout))) {}
  void update(int64_t done, int64_t count) {
    if (!tty_ || (done % 10 != 0 && done != total_)) return;
    double elapsed = clock_.seconds(), rate = double(count) / std::max(elapsed, 1e-9);
    double eta = done ? elapsed * (total_ - done) / done : 0;
    int filled = static_cast<int>(30 * done / std::max<int64_t>(total_, 1));
    std::printf("\r[%s%s] %lld/%lld %6.0f %s ETA %4.0fs", std::string(filled, '=').c_str(),
                std::string(30 - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total_),
                rate, unit_, eta);
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\r%s\r", std::string(80, ' ').c_str());
  }

 private:
  int64_t total_;
  const char* unit_;
  bool tty_;
  Stopwatch clock_;
};

}  // namespace examples
