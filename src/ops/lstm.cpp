// lstm_layer: forward and backward through time for one layer and direction. The backend's
// recurrence kernels (lstm_recurrence_forward/backward) run the steps; this file checks the inputs,
// reads the outputs from the states and records backward. States are stored by time index:
// h_all[t] is the state after processing time t, whichever direction the layer runs.
#include <limits>

#include "amp/policy.h"
#include "ops/op_helpers.h"
#include "tapegrad/amp/autocast.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/join.h"
#include "tapegrad/ops/linalg.h"
#include "tapegrad/ops/reduction.h"
#include "tapegrad/ops/rnn.h"

namespace tapegrad {

using namespace ops;

namespace {

void check_lstm_inputs(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                       const Tensor& b_ih, const Tensor& b_hh) {
  const char* op = "lstm";
  check_defined(op, x, "input");
  check_defined(op, h0, "h0");
  check_defined(op, c0, "c0");
  check_defined(op, w_ih, "weight_ih");
  check_defined(op, w_hh, "weight_hh");
  check_floating(op, x);
  TG_CHECK(x.dim() == 3, "lstm: input must be [T, B, I], got ", shape_str(x.sizes()));
  TG_CHECK(w_hh.dim() == 2 && w_hh.size(0) == 4 * w_hh.size(1), "lstm: weight_hh must be [4H, H], got ",
           shape_str(w_hh.sizes()));
  const int64_t hidden = w_hh.size(1), batch = x.size(1);
  TG_CHECK(w_ih.dim() == 2 && w_ih.size(0) == 4 * hidden && w_ih.size(1) == x.size(2), "lstm: weight_ih ",
           shape_str(w_ih.sizes()), " does not match input ", shape_str(x.sizes()), " and hidden size ", hidden);
  for (const Tensor* s : {&h0, &c0})
    TG_CHECK(s->sizes() == (Shape{batch, hidden}), "lstm: initial state ", shape_str(s->sizes()), " should be [", batch,
             ", ", hidden, "]");
  for (const Tensor* b : {&b_ih, &b_hh})
    if (b->defined())
      TG_CHECK(b->sizes() == (Shape{4 * hidden}), "lstm: bias ", shape_str(b->sizes()), " should be [", 4 * hidden,
               "]");
  for (const Tensor* t : {&h0, &c0, &w_ih, &w_hh, &b_ih, &b_hh}) {
    if (!t->defined()) continue;
    check_same_device(op, x, *t);
    TG_CHECK(t->dtype() == x.dtype(), "lstm: all tensors must share the input's dtype ", x.dtype(), ", got ",
             t->dtype());
  }
}

Tensor checked_lengths(const Tensor& lengths, int64_t steps, int64_t batch, Device device) {
  if (!lengths.defined()) return Tensor();
  TG_CHECK(lengths.dim() == 1 && lengths.size(0) == batch, "lstm: lengths must be [", batch, "], got ",
           shape_str(lengths.sizes()));
  TG_CHECK(lengths.dtype() == kInt64 || lengths.dtype() == kInt32, "lstm: lengths must be integers, got ",
           lengths.dtype());
  Tensor l = cast(lengths.detach(), kInt64).contiguous();
  // Lengths already on the GPU are checked there, without waiting (Note [deferred checks]; the
  // kernels only compare steps with them, so a bad one cannot reach outside a buffer).
  if (l.device() == device && !backend::checks_on_host(device.is_cuda())) {
    auto check_values = TG_KERNEL(device, check_values);
    check_values(l, steps + 1, std::numeric_limits<int64_t>::min(), backend::DeviceCheck::LstmLength);
    return l;
  }
  for (int64_t v : l.tolist<int64_t>())
    TG_CHECK(v >= 0 && v <= steps, "lstm: sequence length ", v, " is outside [0, ", steps, "]");
  return l.to(device);
}

// What backward needs, decided and saved when the forward ran: which inputs want a gradient (no
// GEMM for the data batch x or a zero initial state), the tensors it reads, and the shape.
struct LstmSavedContext {
  bool need_x, need_h0, need_c0, need_w_ih, need_w_hh, need_b_ih, need_b_hh;
  SavedTensor x, w_ih, h0, c0, w_hh, gates, h_all, c_all, lengths, mask;
  int64_t steps, batch, input_size, hidden;
  bool reverse;
  DType products;  // the type the step products ran in (autocast)

  int64_t time(int64_t s) const { return reverse ? steps - 1 - s : s; }
  int64_t gates_width() const { return 4 * hidden; }
};

// The outputs from the states: padded steps masked to zero, and the states at each sequence's
// last step (h_all and c_all already carry a finished row's state through to the end).
LstmLayerOutput outputs_from_states(const Tensor& h_all, const Tensor& c_all, const Tensor& h_init,
                                    const Tensor& c_init, const Tensor& mask, int64_t last_time) {
  LstmLayerOutput out;
  out.output = mask.defined() ? mul(h_all, mask) : h_all.detach();
  out.h_n = last_time < 0 ? h_init.clone() : h_all.select(0, last_time).clone();
  out.c_n = last_time < 0 ? c_init.clone() : c_all.select(0, last_time).clone();
  return out;
}

// [T, B, 1]: 1 where a step is part of its sequence.
Tensor step_mask(const Tensor& lengths, int64_t steps, int64_t batch, DType dtype, Device device) {
  return lt(arange(0, static_cast<double>(steps), 1.0, TensorOptions(kInt64).device(device)).view({steps, 1, 1}),
            lengths.view({1, batch, 1}))
      .to(dtype);
}

// A gradient in the layer's dtype; undefined (nothing used that output) stays undefined.
Tensor in_dtype(const Tensor& grad, DType dtype) {
  return grad.defined() && grad.dtype() != dtype ? grad.to(dtype) : grad;
}

// The gradients of x, h0, c0, w_ih, w_hh, b_ih, b_hh from those of output, h_n and c_n: the
// backend's backward recurrence gives the gates' gradients, then three GEMMs the weights' and
// the input's. Products run in the forward's precision.
std::vector<Tensor> lstm_layer_backward(const LstmSavedContext& ctx, const std::vector<Tensor>& grads) {
  Tensor gates = ctx.gates.get(), h_all = ctx.h_all.get(), c_all = ctx.c_all.get();
  const Device dev = gates.device();
  const DType dt = gates.dtype();
  const int64_t steps = ctx.steps, batch = ctx.batch, input_size = ctx.input_size, hidden = ctx.hidden;
  const int64_t width = ctx.gates_width();
  auto gemm = [&](const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
    gemm_as("lstm", ctx.products, a, b, out, alpha, beta);
  };
  // An output nothing used arrives undefined (recorded with materialize_grads = false) and reads as
  // zeros; g_out is read through its strides. Padded outputs were constants.
  Tensor g_out = in_dtype(grads[0], dt);
  if (g_out.defined() && ctx.mask.defined()) g_out = mul(g_out, ctx.mask.get());

  // The recurrence: running state gradients (fresh buffers, never the incoming tensors) ending as
  // those of h0 and c0, every step's gate gradients, and the bias gradients.
  Tensor dh = empty_tensor({batch, hidden}, dt, dev), dc = empty_tensor({batch, hidden}, dt, dev);
  Tensor dgates = ctx.need_x ? empty_tensor(gates.sizes(), dt, dev) : Tensor();  // [T, B, 4H]
  Tensor db_ih = ctx.need_b_ih ? empty_tensor({width}, dt, dev) : Tensor();
  Tensor db_hh = ctx.need_b_hh ? empty_tensor({width}, dt, dev) : Tensor();
  Tensor dx, dw_ih, dw_hh;
  // Where the backend makes both weight gradients step by step (the CPU at tall batch slices), the
  // gate gradients are kept only for dx.
  bool weights_done = false;
  const auto by_step = backend::kernels(dev).lstm_recurrence_backward_weights;
  if (by_step != nullptr && ctx.need_w_ih && ctx.need_w_hh && ctx.products == dt) {
    dw_ih = empty_tensor({width, input_size}, dt, dev);
    dw_hh = empty_tensor({width, hidden}, dt, dev);
    by_step(gates, ctx.w_hh.get().contiguous(), ctx.x.get(), ctx.h0.get(), h_all, ctx.c0.get(), c_all, g_out,
            in_dtype(grads[1], dt), in_dtype(grads[2], dt), dh, dc, dgates, db_ih, db_hh, dw_ih, dw_hh,
            ctx.lengths.get(), ctx.reverse, &weights_done);
  }
  if (!weights_done) {  // a declining slot wrote nothing: dw_ih and dw_hh, if made, are filled below
    if (!dgates.defined()) dgates = empty_tensor(gates.sizes(), dt, dev);
    backend::kernels(dev).lstm_recurrence_backward(gates, ctx.w_hh.get().contiguous(), ctx.c0.get(), c_all, g_out,
                                                   in_dtype(grads[1], dt), in_dtype(grads[2], dt), dh, dc, dgates,
                                                   db_ih, db_hh, ctx.lengths.get(), ctx.reverse, ctx.products);
  }

  // Under autocast the products below all read dgates in the low type: rounded once here rather
  // than by each of them (on the CPU each rounding is a pass over T x B x 4H floats, a third of
  // them by columns), and the float32 copy freed.
  if (ctx.products != dt && dgates.defined() && dgates.numel() > 0) dgates = dgates.to(ctx.products);
  Tensor dg2 = dgates.defined() ? dgates.view({steps * batch, width}) : Tensor();
  if (ctx.need_x) {
    dx = empty_tensor({steps, batch, input_size}, dt, dev);
    gemm(dg2, ctx.w_ih.get(), dx.view({steps * batch, input_size}), 1.0, 0.0);
  }
  if (ctx.need_w_ih && !weights_done) {
    if (!dw_ih.defined()) dw_ih = empty_tensor({width, input_size}, dt, dev);
    gemm(dg2.t(), ctx.x.get().view({steps * batch, input_size}), dw_ih, 1.0, 0.0);
  }
  if (ctx.need_w_hh && !weights_done) {
    // The sum over t of dgates[t]^T h_prev(t): the step that started from h0 is one small GEMM,
    // every other step reads h_all at the neighbouring time (one large GEMM on views).
    if (!dw_hh.defined()) dw_hh = empty_tensor({width, hidden}, dt, dev);
    if (steps == 0) {
      gemm(dg2.t(), h_all.view({0, hidden}), dw_hh, 1.0, 0.0);  // k = 0: zeros
    } else {
      gemm(dgates.select(0, ctx.time(0)).t(), ctx.h0.get(), dw_hh, 1.0, 0.0);
      if (steps > 1) {
        const int64_t rows = (steps - 1) * batch;
        Tensor dg_rest = dgates.narrow(0, ctx.reverse ? 0 : 1, steps - 1).view({rows, width});
        Tensor h_rest = h_all.narrow(0, ctx.reverse ? 1 : 0, steps - 1).view({rows, hidden});
        gemm(dg_rest.t(), h_rest, dw_hh, 1.0, 1.0);
      }
    }
  }
  return {dx, ctx.need_h0 ? dh : Tensor(), ctx.need_c0 ? dc : Tensor(), dw_ih, dw_hh, db_ih, db_hh};
}

}  // namespace

// One layer and direction: the backend runs the whole recurrence (input projections, recurrent
// products and cells) in one call, the outputs are read from its states, and backward is recorded
// with what it needs.
LstmLayerOutput lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                           const Tensor& b_ih, const Tensor& b_hh, const Tensor& lengths, bool reverse) {
  check_lstm_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  const int64_t steps = x.size(0), batch = x.size(1), hidden = w_hh.size(1);
  const Device device = x.device();
  const DType dtype = x.dtype();
  Tensor lens = checked_lengths(lengths, steps, batch, device);

  // The forward recurrence. The weights and biases go as they are: the backend adds the biases
  // and reads W^T in place. Under autocast its products run in the low type (amp/autocast.h).
  auto plain = [](const Tensor& t) { return t.defined() ? t.detach().contiguous() : Tensor(); };
  Tensor xs = x.detach().contiguous();
  Tensor h_init = h0.detach().contiguous(), c_init = c0.detach().contiguous();
  Tensor gates = empty_tensor({steps, batch, 4 * hidden}, dtype, device);
  Tensor h_all = empty_tensor({steps, batch, hidden}, dtype, device);
  Tensor c_all = empty_tensor({steps, batch, hidden}, dtype, device);
  const DType products = amp::autocast_inputs(amp::AutocastOp::lstm, {&x}).products;
  backend::kernels(device).lstm_recurrence_forward(xs, plain(w_ih), plain(w_hh), plain(b_ih), plain(b_hh), h_init,
                                                   c_init, gates, h_all, c_all, lens, reverse, products);

  Tensor mask = lens.defined() ? step_mask(lens, steps, batch, dtype, device) : Tensor();
  const int64_t last_time = steps == 0 ? -1 : (reverse ? 0 : steps - 1);
  LstmLayerOutput out = outputs_from_states(h_all, c_all, h_init, c_init, mask, last_time);

  if (!any_requires_grad({x, h0, c0, w_ih, w_hh, b_ih, b_hh})) return out;
  LstmSavedContext ctx;
  ctx.need_x = x.requires_grad();
  ctx.need_h0 = h0.requires_grad();
  ctx.need_c0 = c0.requires_grad();
  ctx.need_w_ih = w_ih.requires_grad();
  ctx.need_w_hh = w_hh.requires_grad();
  ctx.need_b_ih = b_ih.defined() && b_ih.requires_grad();
  ctx.need_b_hh = b_hh.defined() && b_hh.requires_grad();
  if (ctx.need_w_ih) ctx.x = SavedTensor(xs);
  if (ctx.need_x) ctx.w_ih = SavedTensor(w_ih);
  ctx.h0 = h_init;
  ctx.c0 = c_init;
  ctx.w_hh = w_hh;
  ctx.gates = gates;
  ctx.h_all = h_all;
  ctx.c_all = c_all;
  ctx.lengths = lens;
  ctx.mask = mask;
  ctx.steps = steps;
  ctx.batch = batch;
  ctx.input_size = x.size(2);
  ctx.hidden = hidden;
  ctx.reverse = reverse;
  ctx.products = products;
  record(
      "lstm", {x, h0, c0, w_ih, w_hh, b_ih, b_hh}, {out.output, out.h_n, out.c_n},
      [ctx](const std::vector<Tensor>& grads) { return lstm_layer_backward(ctx, grads); },
      /*materialize_grads=*/false);
  return out;
}

}  // namespace tapegrad
