// What the stages of a Pipeline say to each other. Every message between neighbours is a header
// (an int64 tensor of fixed length) followed by the tensors it announces, each its own send with
// the same tag: a forward's outputs go to the next stage, a backward's input gradients to the
// previous one, and an abort (a rank failed) either way, with no tensors after it. Stage s only
// receives from s - 1 (activations) and s + 1 (gradients), so one tag serves both directions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/core/tensor.h"
#include "tapegrad/distributed/process_group.h"

namespace tapegrad::distributed::detail {

struct PipelineMessage {
  enum Kind : int64_t { kTensors = 1, kAbort = 2 };
  static constexpr int kMaxTensors = 8;
  static constexpr int kMaxDims = 8;
  static constexpr int kPerTensor = 3 + kMaxDims;  // dtype, requires_grad, ndim, the dims
  // kind, count (or the failed rank), step, micro-batch, micro-batches per step, training, then
  // kPerTensor words per tensor
  static constexpr int kFixed = 6;
  static constexpr int kHeaderLength = kFixed + kMaxTensors * kPerTensor;

  Kind kind = kTensors;
  int64_t step = 0, micro_batch = 0;
  int64_t failed_rank = -1;     // kAbort: the rank whose error stopped the step
  std::vector<Tensor> tensors;  // kTensors, on the CPU
  std::vector<bool> requires_grad;
};

// Sends `tensors` (staged to the CPU, detached) with their requires_grad flags; the Works complete
// when the receiver has them. `what` names the message for errors ("stage 1's outputs").
// `micro_batches` and `training` say which kind of step the sender runs; the receiver checks them.
std::vector<Work> send_tensors(ProcessGroup& group, int peer, int tag, int64_t step, int64_t micro_batch,
                               int64_t micro_batches, bool training, const std::vector<Tensor>& tensors,
                               const std::vector<bool>& requires_grad, const std::string& what);
std::vector<Work> send_abort(ProcessGroup& group, int peer, int tag, int64_t step, int failed_rank);
// Receives one neighbour's messages of a step, in order. The receive of the next header is posted
// as soon as the previous message's tensors are, so its rendezvous runs on the group's worker while
// this stage computes; only the tensors' receives wait for the caller.
class MessageReceiver {
 public:
  // `expected`: how many messages this step brings from `peer` (none are posted beyond that).
  // `micro_batches` and `training`: this rank's step, which the sender's must be.
  MessageReceiver(ProcessGroup& group, int peer, int tag, int64_t expected, int64_t micro_batches, bool training);
  // Blocks for the next message. A tensors message must be for (step, micro_batch): the stages
  // follow the same schedule, so anything else is a bug or a mismatched micro_batches, named.
  PipelineMessage next(int64_t step, int64_t micro_batch, const std::string& what);

 private:
  void post_header();
  ProcessGroup* group_;
  int peer_, tag_;
  int64_t left_;  // headers not yet posted
  int64_t micro_batches_;
  bool training_;
  Tensor header_;
  Work header_work_;
};

}  // namespace tapegrad::distributed::detail
