// checkpoint_sequential: torch.utils.checkpoint.checkpoint_sequential for an nn::Sequential (or a
// list of UnaryModules) run in order on one tensor.
//
//   nn::Sequential model(nn::Linear(64, 64), nn::ReLU(), nn::Dropout(0.1), nn::Linear(64, 64), nn::ReLU());
//   Tensor y = checkpoint_sequential(model, 2, x);  // modules 0-1 recomputed in backward, 2-4 run plainly
//
// The modules are split into `segments` consecutive runs of size() / segments modules, the last
// run taking the remainder (PyTorch's split). Every run but the last goes through checkpoint()
// (tapegrad/autograd/checkpoint.h): only its input is kept, and it is recomputed in backward with
// the forward's random draws replayed, so dropout masks and gradients are those of the plain
// run. The last run is not checkpointed, as in PyTorch: its backward comes first, so recomputing
// it would lower no peak. segments = 1 is the plain forward. Each module is called through its
// operator() (forward hooks run, also in the recomputation), under the module scope Sequential
// gives it. The modules are held (shared) until backward has recomputed them.
//
// Throws tapegrad::Error when segments < 1, when segments exceeds the number of modules, for an
// undefined input, or for a Sequential child that is not a UnaryModule; backward throws when a
// Dropout was switched between train() and eval() after the forward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tapegrad/nn/layers.h"

namespace tapegrad {

Tensor checkpoint_sequential(const nn::Sequential& sequential, int64_t segments, const Tensor& input,
                             bool preserve_rng_state = true);
Tensor checkpoint_sequential(const std::vector<std::shared_ptr<nn::UnaryModule>>& modules, int64_t segments,
                             const Tensor& input, bool preserve_rng_state = true);

}  // namespace tapegrad
