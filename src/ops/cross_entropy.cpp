// cross_entropy (fused log-softmax + NLL, one kernel forward and one backward), nll_loss and
// mse_loss. The per-row losses are one tape node; the reduction is an ordinary sum/div on top.
#include <cmath>

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/indexing.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {

using namespace ops;

namespace {

// Validates class targets against [0, classes) and returns how many are not ignore_index.
// Note: on an accelerator this reads the targets back to the host (one small synchronising copy).
int64_t check_targets(const char* op, const Tensor& target, int64_t classes, int64_t ignore_index) {
  std::vector<int64_t> values = target.tolist<int64_t>();
  int64_t counted = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == ignore_index) continue;
    TG_CHECK(values[i] >= 0 && values[i] < classes, op, ": target ", values[i], " at position ", i,
             " is out of range for ", classes, " classes (expected 0..", classes - 1, " or ignore_index ",
             ignore_index, ")");
    ++counted;
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
  TG_CHECK(target.dim() == input.dim() - 1 && (r.unbatched || target.size(0) == input.size(0)), op, ": target of shape ",
           shape_str(target.sizes()), " does not match input of shape ", shape_str(input.sizes()),
           " (expected [", r.unbatched ? "" : std::to_string(input.size(0)), "])");
  r.target = cast(target.detach().reshape({-1}), kInt64).contiguous();
  return r;
}

Tensor reduce_loss(const char* op, const Tensor& losses, Reduction reduction, int64_t counted, bool unbatched) {
  // PyTorch returns NaN here; a silent NaN in a training loop is worse than an error at its source.
  TG_CHECK(reduction != Reduction::Mean || losses.numel() > 0, op,
           ": empty batch (0 examples): the mean loss over no examples is undefined");
  switch (reduction) {
    case Reduction::None: return unbatched ? losses.reshape({}) : losses;
    case Reduction::Sum: return sum(losses);
    case Reduction::Mean: return div(sum(losses), static_cast<double>(counted));  // 0/0 = nan, like PyTorch
  }
  return losses;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  LossInputs in = check_loss_inputs("cross_entropy", logits, target);
  TG_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  const int64_t rows = in.input.size(0), classes = in.input.size(1);
  TG_CHECK(classes > 0, "cross_entropy: input has no classes (shape ", shape_str(logits.sizes()), ")");
  int64_t counted = check_targets("cross_entropy", in.target, classes, options.ignore_index);
  Tensor z = in.input.detach().contiguous();
  Tensor losses = empty_tensor({rows}, z.dtype(), z.device());
  Tensor lse = empty_tensor({rows}, z.dtype(), z.device());
  if (rows > 0)
    TG_KERNEL(z.device(), cross_entropy)(z, in.target, losses, lse, options.ignore_index, options.label_smoothing);
  if (!any_requires_grad({in.input})) return reduce_loss("cross_entropy", losses, options.reduction, counted, in.unbatched);

  // One tape node from the logits to the returned loss: with a sum or mean the reduction is part of
  // it, and its backward is one kernel pass whose per-row gradient is the loss's gradient scaled by
  // 1 (sum) or 1 / counted (mean), read through a broadcast (stride 0) view.
  const bool reduced = options.reduction != Reduction::None;
  Tensor result;
  {
    NoGradGuard no_grad;
    result = reduced ? reduce_loss("cross_entropy", losses, options.reduction, counted, in.unbatched) : losses;
  }
  const double scale = options.reduction == Reduction::Mean ? 1.0 / static_cast<double>(counted) : 1.0;
  SavedTensor saved_z = z, saved_t = in.target, saved_lse = lse;
  const int64_t ignore = options.ignore_index;
  const double smoothing = options.label_smoothing;
  record("cross_entropy", {in.input}, {result}, [=](const std::vector<Tensor>& g) {
    Tensor zz = saved_z.get();
    Tensor grad_losses = g[0];
    if (reduced) {
      if (scale != 1.0) grad_losses = mul(grad_losses, scale);
      grad_losses = expand_raw(grad_losses.reshape({1}), {zz.size(0)});
    }
    Tensor grad = empty_tensor(zz.sizes(), zz.dtype(), zz.device());
    if (grad.numel() > 0)
      TG_KERNEL(zz.device(), cross_entropy_backward)(grad_losses, zz, saved_t.get(), saved_lse.get(), grad, ignore,
                                                     smoothing);
    return std::vector<Tensor>{grad};
  });
  return reduced || !in.unbatched ? result : result.reshape({});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& options) {
  LossInputs in = check_loss_inputs("nll_loss", log_probs, target);
  TG_CHECK(options.label_smoothing == 0.0, "nll_loss: label_smoothing is a cross_entropy option");
  int64_t counted = check_targets("nll_loss", in.target, in.input.size(1), options.ignore_index);
  Tensor ignored = eq(in.target, static_cast<double>(options.ignore_index));
  Tensor safe_target = where(ignored, zeros_like(in.target), in.target);
  Tensor picked = gather(in.input, 1, safe_target.unsqueeze(1)).squeeze(1);
  Tensor losses = where(ignored, zeros_like(picked), neg(picked));
  return reduce_loss("nll_loss", losses, options.reduction, counted, in.unbatched);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_defined("mse_loss", input, "input");
  check_defined("mse_loss", target, "target");
  TG_CHECK(input.sizes() == target.sizes(), "mse_loss: input ", shape_str(input.sizes()), " and target ",
           shape_str(target.sizes()), " must have the same shape");
  Tensor diff = sub(input, target);
  Tensor squared = mul(diff, diff);
  switch (reduction) {
    case Reduction::None: return squared;
    case Reduction::Sum: return sum(squared);
    case Reduction::Mean:
      TG_CHECK(squared.numel() > 0, "mse_loss: empty input (shape ", shape_str(input.sizes()),
               "): the mean loss over no elements is undefined");
      return mean(squared);
  }
  return squared;
}

}  // namespace tapegrad
