// lstm_layer: forward and backward through time for one layer and direction, with the fused
// cell kernels (src/math/lstm.h) between GEMMs. States are stored by time index: h_all[t] is the
// state after processing time t, whichever direction the layer runs.
#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
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
    TG_CHECK(s->sizes() == (Shape{batch, hidden}), "lstm: initial state ", shape_str(s->sizes()), " should be [",
             batch, ", ", hidden, "]");
  for (const Tensor* b : {&b_ih, &b_hh})
    if (b->defined())
      TG_CHECK(b->sizes() == (Shape{4 * hidden}), "lstm: bias ", shape_str(b->sizes()), " should be [", 4 * hidden, "]");
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
  for (int64_t v : l.tolist<int64_t>())
    TG_CHECK(v >= 0 && v <= steps, "lstm: sequence length ", v, " is outside [0, ", steps, "]");
  return l.to(device);
}

}  // namespace

LstmLayerOutput lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                           const Tensor& b_ih, const Tensor& b_hh, const Tensor& lengths, bool reverse) {
  check_lstm_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  const int64_t steps = x.size(0), batch = x.size(1), input_size = x.size(2), hidden = w_hh.size(1);
  const int64_t gates_width = 4 * hidden;
  const Device device = x.device();
  const DType dtype = x.dtype();
  Tensor lens = checked_lengths(lengths, steps, batch, device);
  auto gemm = TG_KERNEL(device, gemm);
  auto cell = TG_KERNEL(device, lstm_cell_forward);

  Tensor xs = x.detach().contiguous();
  Tensor h_init = h0.detach().contiguous(), c_init = c0.detach().contiguous();
  Tensor whh_t = w_hh.detach().t();

  // All timesteps' input projections (and both biases) in one GEMM.
  Tensor gates = empty_tensor({steps, batch, gates_width}, dtype, device);
  Tensor gates_2d = gates.view({steps * batch, gates_width});
  double beta = 0.0;
  if (b_ih.defined() || b_hh.defined()) {
    Tensor bias = b_ih.defined() && b_hh.defined() ? add(b_ih.detach(), b_hh.detach())
                                                   : (b_ih.defined() ? b_ih.detach() : b_hh.detach());
    if (gates.numel() > 0) TG_KERNEL(device, copy)(expand_raw(bias, gates_2d.sizes()), gates_2d);
    beta = 1.0;
  }
  if (gates.numel() > 0) gemm(xs.view({steps * batch, input_size}), w_ih.detach().t(), gates_2d, 1.0, beta);

  Tensor h_all = empty_tensor({steps, batch, hidden}, dtype, device);
  Tensor c_all = empty_tensor({steps, batch, hidden}, dtype, device);
  auto time_of = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = time_of(s);
    Tensor h_prev = s == 0 ? h_init : h_all.select(0, time_of(s - 1));
    Tensor c_prev = s == 0 ? c_init : c_all.select(0, time_of(s - 1));
    Tensor g = gates.select(0, t);
    gemm(h_prev, whh_t, g, 1.0, 1.0);  // accumulates the recurrent term onto the projection
    cell(g, h_prev, c_prev, h_all.select(0, t), c_all.select(0, t), lens, t);
  }

  LstmLayerOutput out;
  Tensor mask;  // [T, B, 1]: 1 where a step is part of its sequence
  if (lens.defined()) {
    mask = lt(arange(0, static_cast<double>(steps), 1.0, TensorOptions(kInt64).device(device)).view({steps, 1, 1}),
              lens.view({1, batch, 1}))
               .to(dtype);
    out.output = mul(h_all, mask);
  } else {
    out.output = h_all.detach();
  }
  if (steps == 0) {
    out.h_n = h_init.clone();
    out.c_n = c_init.clone();
  } else {
    const int64_t last = time_of(steps - 1);
    out.h_n = h_all.select(0, last).clone();
    out.c_n = c_all.select(0, last).clone();
  }

  if (any_requires_grad({x, h0, c0, w_ih, w_hh, b_ih, b_hh})) {
    SavedTensor sx = xs, sh0 = h_init, sc0 = c_init, sw_ih = w_ih, sw_hh = w_hh, sgates = gates, sh = h_all,
                sc = c_all, slens = lens, smask = mask;
    const bool has_b_ih = b_ih.defined(), has_b_hh = b_hh.defined();
    record("lstm", {x, h0, c0, w_ih, w_hh, b_ih, b_hh}, {out.output, out.h_n, out.c_n},
           [=](const std::vector<Tensor>& grads) {
             Tensor xs_ = sx.get(), h_all_ = sh.get(), c_all_ = sc.get(), gates_ = sgates.get(), lens_ = slens.get();
             Tensor w_ih_ = sw_ih.get(), w_hh_ = sw_hh.get();
             Tensor g_out = grads[0].contiguous();
             if (smask.defined()) g_out = mul(g_out, smask.get());  // padded outputs were constants
             Tensor dh = grads[1].contiguous().clone(), dc = grads[2].contiguous().clone();
             Tensor dgates = empty_tensor(gates_.sizes(), gates_.dtype(), gates_.device());
             auto gemm_ = TG_KERNEL(gates_.device(), gemm);
             auto cell_back = TG_KERNEL(gates_.device(), lstm_cell_backward);
             auto time = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
             for (int64_t s = steps - 1; s >= 0; --s) {
               const int64_t t = time(s);
               dh.add_(g_out.select(0, t));
               Tensor c_prev = s == 0 ? sc0.get() : c_all_.select(0, time(s - 1));
               Tensor dg = dgates.select(0, t);
               cell_back(gates_.select(0, t), c_prev, c_all_.select(0, t), dh, dc, dg, lens_, t);
               gemm_(dg, w_hh_, dh, 1.0, 1.0);  // dh_prev += dgates @ W_hh
             }
             // The state fed into each time t, in time order, for the recurrent weight gradient.
             Tensor h_prev_all = empty_tensor(h_all_.sizes(), h_all_.dtype(), h_all_.device());
             if (steps > 0) {
               Tensor h_first = sh0.get().unsqueeze(0);
               if (reverse) {
                 h_prev_all.narrow(0, 0, steps - 1).copy_(h_all_.narrow(0, 1, steps - 1));
                 h_prev_all.narrow(0, steps - 1, 1).copy_(h_first);
               } else {
                 h_prev_all.narrow(0, 0, 1).copy_(h_first);
                 h_prev_all.narrow(0, 1, steps - 1).copy_(h_all_.narrow(0, 0, steps - 1));
               }
             }
             Tensor dg2 = dgates.view({steps * batch, gates_width});
             Tensor dx = mm(dg2, w_ih_).view({steps, batch, input_size});
             Tensor dw_ih = mm(dg2.t(), xs_.view({steps * batch, input_size}));
             Tensor dw_hh = mm(dg2.t(), h_prev_all.view({steps * batch, hidden}));
             Tensor db = sum(dg2, {0});
             return std::vector<Tensor>{dx, dh, dc, dw_ih, dw_hh, has_b_ih ? db : Tensor(), has_b_hh ? db : Tensor()};
           });
  }
  return out;
}

}  // namespace tapegrad
