// CPUOffloadOptimizer: optimiser-state offload for CUDA training, as torchao's
// CPUOffloadOptimizer. Each CUDA parameter gets a master copy in pinned host memory; the local
// optimiser (Adam, AdamW, SGD, built by a factory) is built over those copies, so its state (Adam's
// two moments, SGD's momentum) lives in host memory and is updated by the fused CPU kernels; the
// GPU holds none of it. See docs/distributed.md.
//
//   model->to(kCUDA);
//   distributed::CPUOffloadOptimizer opt(model->parameters(), [](std::vector<optim::ParamGroup> groups) {
//     return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamOptions().lr(1e-3).weight_decay(1e-2));
//   });
//   loss.backward(); opt.step(); opt.zero_grad();
//   std::cout << opt.offloaded_state_bytes() << " bytes of optimiser state kept off the GPU\n";
//
// step(), bucket by bucket (consecutive CUDA parameters, a bucket closing once it holds
// `bucket_bytes` of gradients; CPU parameters are a bucket of their own):
//   1. queues every gradient's copy into its pinned host buffer (device to host, asynchronous, on
//      the current stream of the parameter's device), with an event after each bucket;
//   2. steps the CPU parameters (as they are) while those copies are in flight;
//   3. for each bucket: waits for its event (that event only, never the whole device), runs the
//      local optimiser's fused CPU update on its master copies, and queues their copies back into
//      the CUDA parameters (host to device, asynchronous, on the same stream), then goes on to the
//      next bucket while those are in flight.
// step() returns once the last uploads are queued: the GPU goes on, and work queued later on that
// stream (the next forward) sees the new values.
//
// What overlaps: the CPU update of bucket k with the downloads of buckets k+1.. and the uploads of
// buckets ..k-1; the CPU parameters' update with every download; the last uploads with whatever the
// host queues next. What does not: the downloads start at step(), not during backward (so
// GradScaler::unscale_ and gradient clipping between backward and step see and change the device
// gradients as usual); downloads and uploads of one device share its current stream, so they run
// one after the other, not in both directions at once; a model in one bucket (under `bucket_bytes`
// of gradients) has no overlap but the CPU parameters'. A bucket's master copies are rewritten only
// after its previous uploads have passed (an event), so a slow GPU makes step() wait, never read
// torn values.
//
// It is an optim::Optimizer: param_groups() are the full groups over the caller's parameters, so a
// scheduler made for it sets the learning rate (each step copies the groups' options to the local
// optimiser); zero_grad() clears the device gradients; a parameter without a gradient is skipped
// (no update, no step count), as the plain optimisers skip it. state_dict() and load_state_dict()
// use the plain optimiser's names and layout ("0.exp_avg", "0.step", "param_groups.0.lr", ...),
// with the state as CPU tensors: a state saved by a plain Adam (on any device) loads here, and one
// saved here loads into a plain Adam, which moves it to its parameters' device. GradScaler works
// with it: scaler.unscale_(opt) and scaler.step(opt) act on the device gradients before step()
// copies them.
//
// The master copies are float32 for float16 and bfloat16 parameters (the update is computed in f32
// and rounded once on the way back), of the parameter's dtype for float32 and float64 ones. They
// are the values step() updates: after changing the CUDA parameters' values outside step() (loading
// a checkpoint into the model), call copy_params_to_host(), or the next step overwrites them.
//
// Memory: the GPU holds the parameters and gradients only; the host holds, per CUDA parameter, the
// master copy and a gradient buffer (pinned; plus a pinned staging buffer for a 16-bit parameter)
// and the optimiser state (pageable: it never crosses the bus). offloaded_state_bytes() is the
// state kept off the GPU: for mlp_seed's Linear(1000,512)-ReLU-Linear(512,10) with Adam, 4,141,136
// bytes (two float32 moments of 517,642 elements). Measured by the GPU allocator
// (tests/distributed/test_distributed_offload.cpp), a plain Adam's first step adds 4,142,080 bytes
// (the moments in 512-byte blocks) and this one's none. With the default buckets that model steps
// in two: fc1.weight, then the other three.
//
// Streams: the gradients are read on the current stream of their device when step() is called (the
// one backward ran on, unless the caller switched), and the values written back on it.
//
// Not supported: add_param_group after construction, parameters moved or resized after
// construction (step() refuses them), capture in a CUDA graph (step() waits on the host), gradient
// offload during backward (torchao's offload_gradients). Tested on the emulated GPU only so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/cuda/stream.h"
#include "tapegrad/distributed/zero.h"  // OptimizerFactory
#include "tapegrad/optim/optimizer.h"

namespace tapegrad::distributed {

class CPUOffloadOptimizer : public optim::Optimizer {
 public:
  // Gradient bytes per bucket by default: big enough that a step is a few local updates, small
  // enough that a model of a few MiB has several buckets to overlap.
  static constexpr int64_t kDefaultBucketBytes = int64_t(1) << 20;

  // The factory is called once, with groups over the host tensors (the master copies of the CUDA
  // parameters, the CPU parameters themselves) and the caller's options; the optimiser it returns
  // must be built over exactly those groups. Parameters that do not require grad are skipped (they
  // have nothing to update), as are those of a group that then has none. Throws tapegrad::Error,
  // naming CPUOffloadOptimizer and the parameter (its index and group), for an empty factory, no
  // parameter that requires grad, an undefined parameter, one listed twice (in a group or across
  // groups), a non-leaf, one on a device other than the CPU or a CUDA device, bucket_bytes <= 0, a
  // factory that returns null, throws (its message is kept) or builds over other groups.
  CPUOffloadOptimizer(std::vector<Tensor> params, OptimizerFactory factory, int64_t bucket_bytes = kDefaultBucketBytes);
  CPUOffloadOptimizer(std::vector<optim::ParamGroup> groups, OptimizerFactory factory,
                      int64_t bucket_bytes = kDefaultBucketBytes);

  // See above. Throws, before any parameter moves, when a group holds an invalid option, a
  // parameter has moved to another device or changed shape since construction, or the current
  // stream is being captured.
  void step() override;

  // Bytes of optimiser state held on the host for the CUDA parameters: what a plain optimiser would
  // hold on the GPU (the local optimiser's per-element state of those parameters, its moments or
  // momentum buffers; not the step counts, which a plain optimiser keeps on the host too). Grows
  // with the first step, as the state is created.
  int64_t offloaded_state_bytes() const;
  // Whether params()[index] lives on a CUDA device (so has a host master copy).
  bool is_offloaded(size_t index) const;
  // The tensor the local optimiser updates for params()[index]: its master copy in pinned host
  // memory, or the parameter itself for a CPU parameter.
  const Tensor& host_param(size_t index) const;
  // The local optimiser, over host_param(0..): its state and groups, for inspection.
  const optim::Optimizer& local_optimizer() const { return *local_; }
  // Indices into params() of each bucket of CUDA parameters, in step order.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

  // Overwrites the master copies with the CUDA parameters' current values (waits for them).
  void copy_params_to_host();

 protected:
  const std::vector<std::string>& group_options() const override { return options_; }
  void fill_defaults(optim::ParamGroup& group) const override;
  void check_group(const optim::ParamGroup& group, const std::string& where) const override;
  StateDict param_state_dict() const override;
  void load_param_state(const StateDict& entries, const std::vector<optim::ParamGroup>& groups) override;

 private:
  // A CUDA parameter's host side. `master` is what the local optimiser updates; `grad` receives the
  // gradient (the parameter's dtype); for a 16-bit parameter `host_grad` is its f32 widening and
  // `upload` the rounded values that travel back (else both are undefined and master travels).
  struct Offloaded {
    Device device;
    Shape sizes;
    Tensor master, grad, host_grad, upload;
  };

  void check_params_unmoved() const;
  void sync_local_groups();

  OptimizerFactory factory_;
  std::vector<std::string> options_;  // the options the local optimiser's groups hold
  std::unique_ptr<optim::Optimizer> local_;
  std::vector<std::unique_ptr<Offloaded>> offloaded_;  // per parameter; null for a CPU parameter
  std::vector<Tensor> host_params_;                    // per parameter: what the local optimiser updates
  std::vector<size_t> cpu_params_;                     // indices of the CPU parameters
  std::vector<std::vector<size_t>> buckets_;
  std::vector<std::vector<cuda::Event>> uploaded_;  // per bucket: its last uploads, one event per device
};

}  // namespace tapegrad::distributed
