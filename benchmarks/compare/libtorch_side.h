// The LibTorch side of the comparison, behind an interface free of torch headers so that only
// libtorch_side.cpp pays their compile time. The models are built to match models/named_configs.h
// layer for layer, with the same parameter names, so a tapegrad state dict loads into them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/named_configs.h"

namespace tapegrad::bench {

struct LibTorchInfo {
  std::string version;        // "1.13.0"
  std::string parallel_info;  // at::get_parallel_info(), condensed to one line
  std::string blas;           // the BLAS line of at::show_config()
};
LibTorchInfo libtorch_info();

// Intra-op and inter-op threads; call once, before any LibTorch work.
void libtorch_set_threads(int threads);

// A LibTorch model, its torch::optim::Adam and a pool of batches on the CPU; mirrors TrainingRun.
class LibTorchRun {
 public:
  // Throws tapegrad::Error when `weights` lacks a parameter of the model or has the wrong shape.
  // autocast_bf16: forward and loss under CPU autocast to bfloat16 (torch.autocast("cpu")), the
  // backward and Adam outside it, as PyTorch's recipe has them.
  LibTorchRun(const ModelShape& shape, const StateDict& weights, const std::vector<Batch>& batches, double lr,
              bool autocast_bf16 = false);
  ~LibTorchRun();
  // Forward, cross-entropy, gradients set to none, backward, Adam step: the same order as tapegrad's.
  void step();
  // The same step with a steady clock read after its forward and loss, its gradients to none and
  // backward, and its Adam step (the CPU: nothing to synchronise). Apart from step() so that the
  // timing of whole steps carries no clock reads.
  StepPhases phased_step();
  double last_loss() const;  // of the latest step
  // The model's forward alone on the next batch of the pool (the logits step() takes the loss of),
  // under torch::InferenceMode with the model in eval(); the first call switches it to eval().
  void infer();
  // Batch i's logits from a forward like infer()'s (the pool's order left alone), copied into a
  // tapegrad CPU tensor, to compare with tapegrad's.
  Tensor output_of(size_t batch);

 private:
  // One step, with mark(phase) after each of its three phases; defined and used in the .cpp only.
  template <typename Mark>
  void run_step(Mark&& mark);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapegrad::bench
