// The pipeline's messages: a header, then the tensors it announces (pipeline_wire.h).
#include "distributed/pipeline_wire.h"

#include <climits>

#include "tapegrad/core/error.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad::distributed::detail {

using ::tapegrad::detail::str_cat;
using Message = PipelineMessage;

namespace {

Tensor new_header(Message::Kind kind, int64_t step, int64_t micro_batch, int64_t micro_batches = 0,
                  bool training = false) {
  Tensor header = zeros({Message::kHeaderLength}, kInt64);
  int64_t* h = header.data<int64_t>();
  h[0] = kind;
  h[2] = step;
  h[3] = micro_batch;
  h[4] = micro_batches;
  h[5] = training ? 1 : 0;
  return header;
}

}  // namespace

std::vector<Work> send_tensors(ProcessGroup& group, int peer, int tag, int64_t step, int64_t micro_batch,
                               int64_t micro_batches, bool training, const std::vector<Tensor>& tensors,
                               const std::vector<bool>& requires_grad, const std::string& what) {
  TG_CHECK(tensors.size() <= size_t(Message::kMaxTensors), "Pipeline: ", what, ": at most ", Message::kMaxTensors,
           " tensors pass between stages, got ", tensors.size());
  // Everything that can fail is done before the first send, so a peer never gets half a message.
  std::vector<Tensor> payload;
  Tensor header = new_header(Message::kTensors, step, micro_batch, micro_batches, training);
  int64_t* h = header.data<int64_t>();
  h[1] = int64_t(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TG_CHECK(t.defined(), "Pipeline: ", what, ": tensor ", i, " is undefined");
    TG_CHECK(t.dim() <= Message::kMaxDims, "Pipeline: ", what, ": tensor ", i, " has ", t.dim(), " dims, at most ",
             Message::kMaxDims, " pass between stages");
    TG_CHECK(t.numel() <= int64_t(INT_MAX), "Pipeline: ", what, ": tensor ", i, " has ", t.numel(),
             " elements, more than one message carries (", INT_MAX, ")");
    payload.push_back(t.detach().to(kCPU).contiguous());
    int64_t* slot = h + Message::kFixed + i * Message::kPerTensor;
    slot[0] = int64_t(t.dtype());
    slot[1] = requires_grad[i] ? 1 : 0;
    slot[2] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) slot[3 + d] = t.size(d);
  }
  std::vector<Work> works{isend_unchecked(group, header, peer, tag)};
  for (const Tensor& t : payload) works.push_back(isend_unchecked(group, t, peer, tag));
  return works;
}

std::vector<Work> send_abort(ProcessGroup& group, int peer, int tag, int64_t step, int failed_rank) {
  Tensor header = new_header(Message::kAbort, step, 0);
  header.data<int64_t>()[1] = failed_rank;
  return {isend_unchecked(group, header, peer, tag)};
}

MessageReceiver::MessageReceiver(ProcessGroup& group, int peer, int tag, int64_t expected, int64_t micro_batches,
                                 bool training)
    : group_(&group), peer_(peer), tag_(tag), left_(expected), micro_batches_(micro_batches), training_(training) {
  if (left_ > 0) post_header();
}

void MessageReceiver::post_header() {
  header_ = empty({Message::kHeaderLength}, kInt64);
  header_work_ = irecv_unchecked(*group_, header_, peer_, tag_);
  --left_;
}

Message MessageReceiver::next(int64_t step, int64_t micro_batch, const std::string& what) {
  TG_CHECK(header_work_.defined(), "Pipeline: ", what, ": internal: no message from rank ", peer_, " was expected");
  header_work_.wait();
  header_work_ = Work();
  const int64_t* h = header_.data<int64_t>();
  const int peer = peer_, tag = tag_;
  Message message;
  message.kind = Message::Kind(h[0]);
  message.step = h[2];
  message.micro_batch = h[3];
  if (message.kind == Message::kAbort) {
    message.failed_rank = h[1];
    return message;
  }
  TG_CHECK(message.kind == Message::kTensors && h[1] >= 0 && h[1] <= Message::kMaxTensors, "Pipeline: ", what,
           ": rank ", peer, " sent a message that is not a pipeline message (tag ", tag,
           " is the pipeline's; do not use it for other sends between these ranks)");
  TG_CHECK(h[4] == micro_batches_, "Pipeline: ", what, ": rank ", peer, " runs ", h[4],
           " micro-batches per step and this rank ", micro_batches_,
           ": every rank needs the same PipelineOptions::micro_batches");
  TG_CHECK((h[5] != 0) == training_, "Pipeline: ", what, ": rank ", peer, " called ", h[5] ? "step()" : "eval_step()",
           " and this rank ", training_ ? "step()" : "eval_step()", ": every rank must call the same one");
  TG_CHECK(message.step == step && message.micro_batch == micro_batch, "Pipeline: ", what, ": rank ", peer,
           " sent step ", message.step, " micro-batch ", message.micro_batch, " where step ", step, " micro-batch ",
           micro_batch,
           " was expected: the ranks disagree on the schedule (the same micro_batches and schedule on "
           "every rank?)");
  for (int64_t i = 0; i < h[1]; ++i) {
    const int64_t* slot = h + Message::kFixed + i * Message::kPerTensor;
    TG_CHECK(slot[0] >= 0 && slot[0] <= int64_t(DType::Bool) && slot[2] >= 0 && slot[2] <= Message::kMaxDims,
             "Pipeline: ", what, ": rank ", peer, " sent a malformed header (tensor ", i, ")");
    Shape shape(slot + 3, slot + 3 + slot[2]);
    message.tensors.push_back(empty(shape, DType(slot[0])));
    message.requires_grad.push_back(slot[1] != 0);
  }
  std::vector<Work> works;
  for (const Tensor& t : message.tensors) works.push_back(irecv_unchecked(*group_, t, peer, tag));
  if (left_ > 0) post_header();  // after this message's tensors: pairs on a channel match in order
  for (const Work& w : works) w.wait();
  return message;
}

}  // namespace tapegrad::distributed::detail
