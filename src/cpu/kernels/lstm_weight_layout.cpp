// The CPU LSTM recurrence's weight layouts. About 1 ms each for a 256-in, 512-unit layer: a sixth of
// what an extra call of the layer costs, paid by each of activation checkpointing's recomputations
// unless kept (Note [kept weight layouts]).
#include "cpu/kernels/lstm_weight_layout.h"

#include "backend/kernel_tensors.h"
#include "backend/weight_layouts.h"
#include "cpu/gemm/sgemm_avx512.h"
#include "cpu/kernels/shared_kernels.h"
#include "cpu/loops/transpose.h"

namespace tapegrad::cpu {

namespace {
// The panel layouts depend on the part count too: kinds kForwardPanels + parts, and so on.
enum Kind : int {
  kForward,
  kBackwardWhhBf16,
  kForwardSgemmPanels,
  kBackwardWhhSgemmPanels,
  kForwardPanels = 1 << 10,
  kBackwardPanels = 2 << 10
};
constexpr int64_t kMaxPanelUnits = 64;

// b_ih + b_hh, or the one defined, or undefined.
Tensor combined_bias(const Tensor& b_ih, const Tensor& b_hh, const Tensor& like) {
  if (b_ih.defined() && b_hh.defined()) {
    Tensor bias = backend::allocate_tensor({b_ih.size(0)}, like.dtype(), like.device(), "lstm");
    binary(BinaryOp::Add, b_ih.detach(), b_hh.detach(), bias);
    return bias;
  }
  if (b_ih.defined() || b_hh.defined()) return backend::contiguous_copy(b_ih.defined() ? b_ih : b_hh, "lstm");
  return Tensor();
}
}  // namespace

UnitRange unit_range(int64_t hidden, int parts, int part) {
  const int64_t vectors = hidden / kUnitsPerVector;
  const int64_t begin = kUnitsPerVector * (vectors * part / parts);
  const int64_t end = part + 1 == parts ? hidden : kUnitsPerVector * (vectors * (part + 1) / parts);
  return {begin, end};
}

std::shared_ptr<const ForwardWeights> forward_weights(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                      const Tensor& b_hh, DType products, bool panels) {
  TG_ASSERT(!panels || (products == kFloat32 && w_hh.dtype() == kFloat32), "lstm: panels are for float32 products");
  return backend::kept_layout<ForwardWeights>(
      panels ? kForwardSgemmPanels : kForward, products, {w_ih, w_hh, b_ih, b_hh}, [&] {
        auto out = std::make_shared<ForwardWeights>();
        const int64_t input = w_ih.size(1), hidden = w_hh.size(1), width = 4 * hidden, depth = input + hidden;
        const DType dtype = w_hh.dtype();
        // From the caching allocator and through the copy kernel's blocked transposes.
        Tensor w_t = backend::allocate_tensor({depth, width}, dtype, w_hh.device(), "lstm");
        copy(w_ih.detach().t(), w_t.narrow(0, 0, input));
        copy(w_hh.detach().t(), w_t.narrow(0, input, hidden));
        if (products == kBFloat16)
          out->w_t_bf16 = PackedBf16Matrix(static_cast<const float*>(w_t.data_ptr()), width, 1, depth, width);
        if (panels) {
          out->w_t_panels =
              backend::allocate_tensor({sgemm_b_panels_floats(depth, width)}, kFloat32, w_hh.device(), "lstm");
          sgemm_lay_out_b_panels(depth, width, static_cast<const float*>(w_t.data_ptr()), width, 1,
                                 static_cast<float*>(out->w_t_panels.data_ptr()));
        } else {
          out->w_t = std::move(w_t);
        }
        out->bias = combined_bias(b_ih, b_hh, w_hh);
        return std::shared_ptr<const ForwardWeights>(std::move(out));
      });
}

std::shared_ptr<const ForwardUnitPanels> forward_unit_panels(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                             const Tensor& b_hh, int parts) {
  return backend::kept_layout<ForwardUnitPanels>(kForwardPanels + parts, w_hh.dtype(), {w_ih, w_hh, b_ih, b_hh}, [&] {
    auto out = std::make_shared<ForwardUnitPanels>();
    const int64_t input = w_ih.size(1), hidden = w_hh.size(1), depth = input + hidden;
    const Tensor wi = w_ih.detach(), wh = w_hh.detach();
    // Note [panels laid out in place]: at batch 1 the panels are laid out again at every training
    // step (the optimiser has changed the weights). Through the copy kernel, 16 copies of views a
    // step for lstm_small (their views and dispatch included) took 7% of its 0.28 ms step;
    // transposed straight from contiguous weights, 2.4%: on one Zen 5 thread 0.280-0.288 ->
    // 0.265-0.274 ms a step (four pairs). The same blocked transposes, so the same bytes.
    const bool contiguous = wi.is_contiguous() && wh.is_contiguous() && wi.dtype() == wh.dtype();
    const int64_t element = dtype_size(wh.dtype());
    for (int part = 0; part < parts; ++part) {
      const UnitRange range = unit_range(hidden, parts, part);
      // Panels of equal whole vectors, at most kMaxPanelUnits units each (the last takes the tail).
      const int64_t vectors = (range.end - range.begin + kUnitsPerVector - 1) / kUnitsPerVector;
      const int64_t count = (vectors * kUnitsPerVector + kMaxPanelUnits - 1) / kMaxPanelUnits;
      for (int64_t k = 0; k < count; ++k) {
        const int64_t u0 = range.begin + kUnitsPerVector * (vectors * k / count);
        const int64_t u1 = k + 1 == count ? range.end : range.begin + kUnitsPerVector * (vectors * (k + 1) / count);
        if (u0 >= u1) continue;
        const int64_t units = u1 - u0;
        Tensor data = backend::allocate_tensor({depth, 4 * units}, w_hh.dtype(), w_hh.device(), "lstm");
        for (int64_t gate = 0; gate < 4; ++gate) {
          if (contiguous) {  // Note [panels laid out in place]
            char* columns = static_cast<char*>(data.data_ptr()) + gate * units * element;  // rows 4 * units apart
            const auto* from_ih = static_cast<const char*>(wi.data_ptr()) + (gate * hidden + u0) * input * element;
            const auto* from_hh = static_cast<const char*>(wh.data_ptr()) + (gate * hidden + u0) * hidden * element;
            const bool moved = transpose_2d(from_ih, input, columns, 4 * units, input, units, element, false) &&
                               transpose_2d(from_hh, hidden, columns + input * 4 * units * element, 4 * units, hidden,
                                            units, element, false);
            TG_ASSERT(moved, "lstm: no transpose for ", element, "-byte elements");
            continue;
          }
          const Tensor columns = data.narrow(1, gate * units, units);  // [depth, units], rows 4 * units apart
          copy(wi.narrow(0, gate * hidden + u0, units).t(), columns.narrow(0, 0, input));
          copy(wh.narrow(0, gate * hidden + u0, units).t(), columns.narrow(0, input, hidden));
        }
        out->panels.push_back(UnitPanel{part, u0, units, std::move(data)});
      }
    }
    out->bias = combined_bias(b_ih, b_hh, w_hh);
    return std::shared_ptr<const ForwardUnitPanels>(std::move(out));
  });
}

std::shared_ptr<const BackwardUnitPanels> backward_unit_panels(const Tensor& w_hh, int parts) {
  return backend::kept_layout<BackwardUnitPanels>(kBackwardPanels + parts, w_hh.dtype(), {w_hh}, [&] {
    auto out = std::make_shared<BackwardUnitPanels>();
    const int64_t hidden = w_hh.size(1);
    const Tensor w = w_hh.detach();
    for (int part = 0; part < parts; ++part) {
      const UnitRange range = unit_range(hidden, parts, part);
      const int64_t units = range.end - range.begin;
      if (units <= 0) continue;
      const Tensor columns = w.narrow(1, range.begin, units);
      out->panels.push_back(UnitPanel{part, range.begin, units,
                                      columns.is_contiguous() ? columns : backend::contiguous_copy(columns, "lstm")});
    }
    return std::shared_ptr<const BackwardUnitPanels>(std::move(out));
  });
}

std::shared_ptr<const PackedBf16Matrix> backward_w_hh_bf16(const Tensor& w_hh) {
  return backend::kept_layout<PackedBf16Matrix>(kBackwardWhhBf16, kBFloat16, {w_hh}, [&] {
    const Tensor w = w_hh.is_contiguous() ? w_hh : backend::contiguous_copy(w_hh, "lstm");
    const int64_t hidden = w.size(1), width = w.size(0);
    return std::make_shared<const PackedBf16Matrix>(static_cast<const float*>(w.data_ptr()), hidden, 1, width, hidden);
  });
}

std::shared_ptr<const Tensor> backward_w_hh_panels(const Tensor& w_hh) {
  return backend::kept_layout<Tensor>(kBackwardWhhSgemmPanels, kFloat32, {w_hh}, [&] {
    const int64_t hidden = w_hh.size(1), width = w_hh.size(0);
    Tensor out = backend::allocate_tensor({sgemm_b_panels_floats(width, hidden)}, kFloat32, w_hh.device(), "lstm");
    sgemm_lay_out_b_panels(width, hidden, static_cast<const float*>(w_hh.data_ptr()), w_hh.stride(0), w_hh.stride(1),
                           static_cast<float*>(out.data_ptr()));
    return std::make_shared<const Tensor>(std::move(out));
  });
}

}  // namespace tapegrad::cpu
