// cross_entropy (fused log-softmax + NLL, one kernel forward and one backward), nll_loss and
// mse_loss. cross_entropy's per-row losses and their sum or mean are one tape node: the kernel
// reduces and counts the rows not ignored itself, and its backward divides by that count, so a
// mean on CUDA waits for nothing and costs no launch of its own. With a per-class weight,
// cross_entropy is composed from log_softmax and the weighted NLL instead, reduced by ordinary ops.
#include <cmath>

#include "amp/policy.h"
#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/indexing.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

using namespace ops;

namespace {

// How many targets count towards the mean: a number when the targets were read on the host, else
// (deferred checks on CUDA) a 0-d tensor computed on the device, so nothing waits for the GPU.
struct Counted {
  int64_t host = 0;
  Tensor device;  // 0-d in the loss's dtype, defined when the count stays on the device
};

// Validates class targets against [0, classes) and counts those that are not ignore_index. On the
// host for CPU tensors and with cuda::sync_checks() (a synchronising read); otherwise a kernel
// checks them (the fused cross_entropy kernel, or check_values when `fused` is false) and the
// Error comes at the next synchronisation (Note [deferred checks]).
// `dtype` (the loss's) and `need_count` (an unweighted mean) say what the device count is for.
Counted check_targets(const char* op, backend::DeviceCheck check, const Tensor& target, int64_t classes,
                      int64_t ignore_index, DType dtype, bool need_count, bool fused) {
  Counted counted;
  if (!backend::checks_on_host(target.device().is_cuda())) {
    if (!fused && target.numel() > 0) TG_KERNEL(target.device(), check_values)(target, classes, ignore_index, check);
    if (need_count) counted.device = cast(sum(ne(target, static_cast<double>(ignore_index))), dtype);
    return counted;
  }
  std::vector<int64_t> values = target.tolist<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == ignore_index) continue;
    TG_CHECK(values[i] >= 0 && values[i] < classes, op, ": target ", values[i], " at position ", i,
             " is out of range for ", classes, " classes (expected 0..", classes - 1, " or ignore_index ", ignore_index,
             ")");
    ++counted.host;
  }
  return counted;
}

struct LossInputs {
  Tensor input;   // [N, C]
  Tensor target;  // [N] int64, contiguous, no grad
  bool unbatched = false;
};

LossInputs check_loss_inputs(const char* op, const Tensor& input, const Tensor& target) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  check_floating(op, input);
  TG_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, op,
           ": target must hold class indices (int64 or int32), got ", target.dtype());
  TG_CHECK(input.dim() == 1 || input.dim() == 2, op, ": input must be [N, C] or [C], got ", shape_str(input.sizes()));
  LossInputs r;
  r.unbatched = input.dim() == 1;
  r.input = r.unbatched ? input.unsqueeze(0) : input;
  TG_CHECK(target.dim() == input.dim() - 1 && (r.unbatched || target.size(0) == input.size(0)), op,
           ": target of shape ", shape_str(target.sizes()), " does not match input of shape ", shape_str(input.sizes()),
           " (expected [", r.unbatched ? "" : std::to_string(input.size(0)), "])");
  r.target = cast(target.detach().reshape({-1}), kInt64).contiguous();
  return r;
}

// With a class weight, the mean divides by `total_weight` (the sum of weight[target] over the
// rows not ignored) instead of `counted`.
Tensor reduce_loss(const char* op, const Tensor& losses, Reduction reduction, const Counted& counted, bool unbatched,
                   const Tensor& total_weight = Tensor()) {
  // PyTorch returns NaN here; a silent NaN in a training loop is worse than an error at its source.
  TG_CHECK(reduction != Reduction::Mean || losses.numel() > 0, op,
           ": empty batch (0 examples): the mean loss over no examples is undefined");
  switch (reduction) {
    case Reduction::None:
      return unbatched ? losses.reshape({}) : losses;
    case Reduction::Sum:
      return sum(losses);
    case Reduction::Mean:  // 0/0 = nan, like PyTorch
      if (total_weight.defined()) return div(sum(losses), total_weight);
      if (counted.device.defined()) return div(sum(losses), counted.device);
      return div(sum(losses), static_cast<double>(counted.host));
  }
  return losses;
}

// The per-class weight checked and cast to the input's dtype, without autograd (PyTorch has no
// gradient for it either).
Tensor class_weight(const char* op, const Tensor& weight, const Tensor& input) {
  check_same_device(op, input, weight);
  TG_CHECK(weight.is_floating_point(), op, ": weight must be floating point, got ", weight.dtype());
  TG_CHECK(weight.dim() == 1 && weight.size(0) == input.size(1), op, ": weight of shape ", shape_str(weight.sizes()),
           " must be [", input.size(1), "], one value per class of the input ", shape_str(input.sizes()));
  return cast(weight.detach(), input.dtype());
}

// -log_probs[n, target[n]] * weight[target[n]] (weight may be undefined: 1), 0 for ignored rows, and
// the weights each row counts with (for the mean's denominator; undefined without a weight).
struct PickedLosses {
  Tensor losses, row_weight;
};

PickedLosses pick_losses(const Tensor& log_probs, const Tensor& target, int64_t ignore_index, const Tensor& weight) {
  // An ignored row's target may be any value: it reads class 0, and `where` drops what it read.
  Tensor kept = ne(target, static_cast<double>(ignore_index));
  Tensor safe_target = where(kept, target, 0.0);
  Tensor picked = gather(log_probs, 1, safe_target.unsqueeze(1)).squeeze(1);
  PickedLosses r;
  if (weight.defined()) {
    r.row_weight = where(kept, index_select(weight, 0, safe_target), 0.0);
    picked = mul(picked, r.row_weight);
  }
  r.losses = where(kept, neg(picked), 0.0);
  return r;
}

// cross_entropy with a class weight, as PyTorch composes it: log_softmax, the weighted NLL and,
// with smoothing, (1 - e) * nll + e / C * smooth where smooth = -sum_c weight_c * log_softmax_c.
Tensor weighted_cross_entropy(const LossInputs& in, const CrossEntropyOptions& options, const Counted& counted) {
  const char* op = "cross_entropy";
  Tensor weight = class_weight(op, options.weight, in.input);
  Tensor log_probs = log_softmax(in.input, 1);
  PickedLosses nll = pick_losses(log_probs, in.target, options.ignore_index, weight);
  Tensor total_weight = sum(nll.row_weight);
  Tensor result = reduce_loss(op, nll.losses, options.reduction, counted, in.unbatched, total_weight);
  const double e = options.label_smoothing;
  if (e == 0.0) return result;
  Tensor kept = ne(in.target, static_cast<double>(options.ignore_index));
  Tensor smooth = where(kept, neg(sum(mul(log_probs, weight.unsqueeze(0)), Shape{1})), 0.0);
  Tensor smooth_result = reduce_loss(op, smooth, options.reduction, counted, in.unbatched, total_weight);
  return add(mul(result, 1.0 - e), mul(smooth_result, e / static_cast<double>(in.input.size(1))));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::cross_entropy, {&logits}).float32)
    return cross_entropy((*f)[0], target, options);
  LossInputs in = check_loss_inputs("cross_entropy", logits, target);
  TG_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  const int64_t rows = in.input.size(0), classes = in.input.size(1);
  TG_CHECK(classes > 0, "cross_entropy: input has no classes (shape ", shape_str(logits.sizes()), ")");
  const bool weighted = options.weight.defined();
  Counted counted = check_targets("cross_entropy", backend::DeviceCheck::CrossEntropyTarget, in.target, classes,
                                  options.ignore_index, logits.dtype(), /*need_count=*/false, /*fused=*/!weighted);
  if (weighted) return weighted_cross_entropy(in, options, counted);
  TG_CHECK(options.reduction != Reduction::Mean || rows > 0,
           "cross_entropy: empty batch (0 examples): the mean loss over no examples is undefined");
  Tensor z = in.input.detach().contiguous();
  Tensor losses = empty_tensor({rows}, z.dtype(), z.device());
  Tensor lse = empty_tensor({rows}, z.dtype(), z.device());
  // With a sum or mean the kernel writes it into `result`; a mean also counts the rows not
  // ignored into `count`, which the backward divides by.
  const bool reduced = options.reduction != Reduction::None;
  const bool mean = options.reduction == Reduction::Mean;
  Tensor result = reduced ? empty_tensor({}, z.dtype(), z.device()) : losses;
  Tensor count = mean ? empty_tensor({}, kInt64, z.device()) : Tensor();
  if (rows > 0) {
    auto kernel = TG_KERNEL(z.device(), cross_entropy);
    kernel(z, in.target, losses, lse, reduced ? result : Tensor(), count, options.ignore_index,
           options.label_smoothing);
  } else if (reduced) {
    result = zeros({}, TensorOptions(z.dtype()).device(z.device()));  // the sum over no rows
  }
  if (!any_requires_grad({in.input})) return reduced || !in.unbatched ? result : result.reshape({});

  // One tape node from the logits to the returned loss; its backward is one kernel pass whose
  // per-row gradient is the loss's gradient (a sum or mean's read through a broadcast, stride-0
  // view), divided by the count for a mean.
  SavedTensor saved_z = z, saved_t = in.target, saved_lse = lse;
  const int64_t ignore = options.ignore_index;
  const double smoothing = options.label_smoothing;
  record("cross_entropy", {in.input}, {result}, [=](const std::vector<Tensor>& g) {
    Tensor zz = saved_z.get();
    Tensor grad_losses = g[0];
    if (reduced) grad_losses = expand_raw(grad_losses.reshape({1}), {zz.size(0)});
    Tensor grad = empty_tensor(zz.sizes(), zz.dtype(), zz.device());
    if (grad.numel() > 0) {
      auto backward = TG_KERNEL(zz.device(), cross_entropy_backward);
      backward(grad_losses, count, zz, saved_t.get(), saved_lse.get(), grad, ignore, smoothing);
    }
    return std::vector<Tensor>{grad};
  });
  return reduced || !in.unbatched ? result : result.reshape({});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& options) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::nll_loss, {&log_probs}).float32)
    return nll_loss((*f)[0], target, options);
  LossInputs in = check_loss_inputs("nll_loss", log_probs, target);
  TG_CHECK(options.label_smoothing == 0.0, "nll_loss: label_smoothing is a cross_entropy option");
  Counted counted =
      check_targets("nll_loss", backend::DeviceCheck::NllLossTarget, in.target, in.input.size(1), options.ignore_index,
                    log_probs.dtype(), options.reduction == Reduction::Mean && !options.weight.defined(),
                    /*fused=*/false);
  Tensor weight = options.weight.defined() ? class_weight("nll_loss", options.weight, in.input) : Tensor();
  PickedLosses picked = pick_losses(in.input, in.target, options.ignore_index, weight);
  Tensor total_weight = weight.defined() ? sum(picked.row_weight) : Tensor();
  return reduce_loss("nll_loss", picked.losses, options.reduction, counted, in.unbatched, total_weight);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto f = amp::autocast_inputs(amp::AutocastOp::mse_loss, {&input, &target}).float32)
    return mse_loss((*f)[0], (*f)[1], reduction);
  check_defined("mse_loss", input, "input");
  check_defined("mse_loss", target, "target");
  TG_CHECK(input.sizes() == target.sizes(), "mse_loss: input ", shape_str(input.sizes()), " and target ",
           shape_str(target.sizes()), " must have the same shape");
  Tensor diff = sub(input, target);
  Tensor squared = mul(diff, diff);
  switch (reduction) {
    case Reduction::None:
      return squared;
    case Reduction::Sum:
      return sum(squared);
    case Reduction::Mean:
      TG_CHECK(squared.numel() > 0, "mse_loss: empty input (shape ", shape_str(input.sizes()),
               "): the mean loss over no elements is undefined");
      return mean(squared);
  }
  return squared;
}

}  // namespace tapegrad
