// The examples' --amp flag (docs/amp.md): off, bf16 (CPU or CUDA) or f16 (CUDA). The whole run,
// training and evaluation, goes under amp::AutocastGuard, so the products of linear layers and
// LSTMs run in the low type with float32 sums; with f16 the training steps also go through an
// amp::GradScaler, so that small gradients survive their f16 products.
#pragma once

#include <cxxopts.hpp>
#include <optional>
#include <string>

#include "cli_values.h"
#include "tapegrad/tapegrad.h"

namespace examples {

inline void add_amp_options(cxxopts::Options& cli) {
  cli.add_options()("amp",
                    "mixed precision: off, bf16 (products in bfloat16 with float32 sums), or f16 (CUDA, with loss "
                    "scaling)",
                    cxxopts::value<std::string>()->default_value("off"));
}

class AmpSession {
 public:
  // Opens the guard for the rest of the calling thread's run. Throws UsageError for a bad --amp.
  AmpSession(const cxxopts::ParseResult& args, tapegrad::Device device) : mode_(args["amp"].as<std::string>()) {
    using namespace tapegrad;
    if (mode_ != "off" && mode_ != "bf16" && mode_ != "f16")
      throw UsageError("--amp must be off, bf16 or f16, got '" + mode_ + "'");
    if (mode_ == "f16" && !device.is_cuda())
      throw UsageError("--amp f16 needs a CUDA device (autocast on the CPU runs in bf16), got " + device.str());
    if (mode_ != "off") guard_.emplace(device, mode_ == "f16" ? kFloat16 : kBFloat16);
    if (mode_ == "f16") scaler_.emplace();
  }

  // The scaler of an f16 run, else nullptr.
  tapegrad::amp::GradScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }

  // loss.backward() and opt.step(), through the scaler when there is one (a step with inf or NaN
  // gradients is then skipped and the scale backs off).
  void backward_and_step(const tapegrad::Tensor& loss, tapegrad::optim::Optimizer& opt) {
    if (!scaler_) {
      loss.backward();
      opt.step();
      return;
    }
    scaler_->scale(loss).backward();
    scaler_->step(opt);
    scaler_->update();
  }

  // For the banner: "", or ", amp bf16" / ", amp f16 with loss scaling".
  std::string describe() const {
    if (mode_ == "off") return "";
    return ", amp " + mode_ + (scaler_ ? " with loss scaling" : "");
  }

 private:
  std::string mode_;
  std::optional<tapegrad::amp::AutocastGuard> guard_;
  std::optional<tapegrad::amp::GradScaler> scaler_;
};

}  // namespace examples
