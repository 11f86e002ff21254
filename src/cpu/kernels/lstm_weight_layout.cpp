// The CPU LSTM recurrence's weight layouts. About 1 ms each for a 256-in, 512-unit layer: a sixth of
// what an extra call of the layer costs, paid by each of activation checkpointing's recomputations
// unless kept (Note [kept weight layouts]).
#include "cpu/kernels/lstm_weight_layout.h"

#include "backend/kernel_tensors.h"
#include "backend/weight_layouts.h"
#include "cpu/kernels/shared_kernels.h"

namespace tapegrad::cpu {

namespace {
enum Kind : int { kForward, kBackwardWhhBf16 };
}  // namespace

std::shared_ptr<const ForwardWeights> forward_weights(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                      const Tensor& b_hh, DType products) {
  return backend::kept_layout<ForwardWeights>(kForward, products, {w_ih, w_hh, b_ih, b_hh}, [&] {
    auto out = std::make_shared<ForwardWeights>();
    const int64_t input = w_ih.size(1), hidden = w_hh.size(1), width = 4 * hidden, depth = input + hidden;
    const DType dtype = w_hh.dtype();
    // From the caching allocator and through the copy kernel's blocked transposes.
    out->w_t = backend::allocate_tensor({depth, width}, dtype, w_hh.device(), "lstm");
    copy(w_ih.detach().t(), out->w_t.narrow(0, 0, input));
    copy(w_hh.detach().t(), out->w_t.narrow(0, input, hidden));
    if (products == kBFloat16)
      out->w_t_bf16 = PackedBf16Matrix(static_cast<const float*>(out->w_t.data_ptr()), width, 1, depth, width);
    if (b_ih.defined() && b_hh.defined()) {
      out->bias = backend::allocate_tensor({width}, dtype, w_hh.device(), "lstm");
      binary(BinaryOp::Add, b_ih.detach(), b_hh.detach(), out->bias);
    } else if (b_ih.defined() || b_hh.defined()) {
      out->bias = backend::contiguous_copy(b_ih.defined() ? b_ih : b_hh, "lstm");
    }
    return std::shared_ptr<const ForwardWeights>(std::move(out));
  });
}

std::shared_ptr<const PackedBf16Matrix> backward_w_hh_bf16(const Tensor& w_hh) {
  return backend::kept_layout<PackedBf16Matrix>(kBackwardWhhBf16, kBFloat16, {w_hh}, [&] {
    const Tensor w = w_hh.is_contiguous() ? w_hh : backend::contiguous_copy(w_hh, "lstm");
    const int64_t hidden = w.size(1), width = w.size(0);
    return std::make_shared<const PackedBf16Matrix>(static_cast<const float*>(w.data_ptr()), hidden, 1, width, hidden);
  });
}

}  // namespace tapegrad::cpu
