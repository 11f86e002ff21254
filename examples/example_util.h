// Small pieces the example programs share: device choice and timing.
#pragma once

#include <chrono>
#include <string>

#include "tapegrad/tapegrad.h"

namespace examples {

// "cpu", "cuda", "cuda:N", or "auto" (the first GPU when one is present, else the CPU).
inline tapegrad::Device pick_device(const std::string& name) {
  if (name == "auto") return tapegrad::cuda::is_available() ? tapegrad::kCUDA : tapegrad::kCPU;
  return tapegrad::Device(name);
}

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace examples
