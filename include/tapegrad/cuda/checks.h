// How ops check index and target values of CUDA tensors (available in every build).
//
// By default the checks are deferred: the kernel that reads the values checks them and records the
// first bad one on the device, and the Error is raised at the next point that synchronises with
// the GPU anyway: Tensor::item(), a copy to the CPU, cuda::synchronize(), Stream::synchronize() or
// Event::synchronize(). A training step then never waits for the GPU. The message is the one the
// immediate check gives ("cross_entropy: target 12 at position 3 is out of range for 10
// classes ..."), raised later. With sync checks on (TAPEGRAD_CUDA_SYNC_CHECKS=1 in the
// environment, or set_sync_checks(true)) ops copy the values to the host and raise at once, at
// the cost of a host synchronisation per checked op: a debug mode. CPU tensors are always checked
// at once.
#pragma once

namespace tapegrad::cuda {

// TAPEGRAD_CUDA_SYNC_CHECKS=1 at the first call, unless set_sync_checks() said otherwise.
bool sync_checks();
// Thread-safe; applies to ops called afterwards.
void set_sync_checks(bool on);

}  // namespace tapegrad::cuda
