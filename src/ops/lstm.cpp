// lstm_layer: forward and backward through time for one layer and direction, with the fused
// cell kernels (src/math/lstm.h) between GEMMs. States are stored by time index: h_all[t] is the
// state after processing time t, whichever direction the layer runs.
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
    TG_KERNEL(device, check_values)
    (l, steps + 1, std::numeric_limits<int64_t>::min(), backend::DeviceCheck::LstmLength);
    return l;
  }
  for (int64_t v : l.tolist<int64_t>())
    TG_CHECK(v >= 0 && v <= steps, "lstm: sequence length ", v, " is outside [0, ", steps, "]");
  return l.to(device);
}

// Note [time slices]: the per-step loops read and write one time slice of the [T, ...] buffers per
// step. A TimeSlice is one view handle whose offset moves from step to step, so the loops allocate
// nothing (a fresh select() per slice costs three heap allocations, a visible share of a batch-1
// step). Kernels read the data pointer when called and keep no reference to the view.
class TimeSlice {
 public:
  explicit TimeSlice(const Tensor& all) : all_(all), base_(all.storage_offset()), step_(all.stride(0)) {}
  // The view is made at the first step asked for: with no steps at all (T = 0) there is no step
  // inside the storage to point it at.
  const Tensor& at(int64_t t) {
    if (!view_.defined()) {
      view_ = make_view(all_, Shape(all_.sizes().begin() + 1, all_.sizes().end()),
                        Shape(all_.strides().begin() + 1, all_.strides().end()), base_ + t * step_);
    } else {
      view_.impl()->offset = base_ + t * step_;
    }
    return view_;
  }

 private:
  Tensor all_, view_;
  int64_t base_, step_;
};

}  // namespace

LstmLayerOutput lstm_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const Tensor& w_ih, const Tensor& w_hh,
                           const Tensor& b_ih, const Tensor& b_hh, const Tensor& lengths, bool reverse) {
  check_lstm_inputs(x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  const int64_t steps = x.size(0), batch = x.size(1), input_size = x.size(2), hidden = w_hh.size(1);
  const int64_t gates_width = 4 * hidden;
  const Device device = x.device();
  const DType dtype = x.dtype();
  Tensor lens = checked_lengths(lengths, steps, batch, device);
  auto cell = TG_KERNEL(device, lstm_cell_forward);

  Tensor xs = x.detach().contiguous();
  Tensor h_init = h0.detach().contiguous(), c_init = c0.detach().contiguous();
  Tensor gates = empty_tensor({steps, batch, gates_width}, dtype, device);
  Tensor h_all = empty_tensor({steps, batch, hidden}, dtype, device);
  Tensor c_all = empty_tensor({steps, batch, hidden}, dtype, device);
  auto time_of = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
  // Under autocast the products run in the low type (amp/autocast.h): in the whole-recurrence kernel
  // where the backend has one, else in each GEMM below.
  const DType products = amp::autocast_inputs(amp::AutocastOp::lstm, {&x}).products;
  auto forward_recurrence = backend::kernels(device).lstm_recurrence_forward;
  auto gemm = [&](const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
    gemm_as("lstm", products, a, b, out, alpha, beta);
  };
  auto plain = [](const Tensor& t) { return t.defined() ? t.detach().contiguous() : Tensor(); };
  if (forward_recurrence != nullptr) {
    // The weights and biases as they are: the backend adds the biases and reads W^T in place.
    forward_recurrence(xs, plain(w_ih), plain(w_hh), plain(b_ih), plain(b_hh), h_init, c_init, gates, h_all, c_all,
                       lens, reverse, products);
  } else {
    Tensor bias;  // b_ih + b_hh, added once per gate
    if (b_ih.defined() || b_hh.defined())
      bias = b_ih.defined() && b_hh.defined() ? add(b_ih.detach(), b_hh.detach()) : plain(b_ih.defined() ? b_ih : b_hh);
    // All timesteps' input projections (and the biases) in one GEMM, then one recurrent GEMM and
    // one cell call per step.
    Tensor gates_2d = gates.view({steps * batch, gates_width});
    double beta = 0.0;
    if (bias.defined() && gates.numel() > 0) {
      TG_KERNEL(device, copy)(expand_raw(bias, gates_2d.sizes()), gates_2d);
      beta = 1.0;
    }
    if (gates.numel() > 0) gemm(xs.view({steps * batch, input_size}), w_ih.detach().t(), gates_2d, 1.0, beta);
    Tensor whh_t = w_hh.detach().t();
    TimeSlice h_prev_at(h_all), c_prev_at(c_all), h_new_at(h_all), c_new_at(c_all), gates_at(gates);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = time_of(s);
      const Tensor& h_prev = s == 0 ? h_init : h_prev_at.at(time_of(s - 1));
      const Tensor& c_prev = s == 0 ? c_init : c_prev_at.at(time_of(s - 1));
      const Tensor& g = gates_at.at(t);
      gemm(h_prev, whh_t, g, 1.0, 1.0);  // accumulates the recurrent term onto the projection
      cell(g, h_prev, c_prev, h_new_at.at(t), c_new_at.at(t), lens, t);
    }
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
    // What backward computes is decided now: no GEMM for an input that needs no gradient (the data
    // batch x, a zero initial state).
    const bool need_x = x.requires_grad(), need_h0 = h0.requires_grad(), need_c0 = c0.requires_grad();
    const bool need_w_ih = w_ih.requires_grad(), need_w_hh = w_hh.requires_grad();
    const bool need_b_ih = b_ih.defined() && b_ih.requires_grad(), need_b_hh = b_hh.defined() && b_hh.requires_grad();
    SavedTensor sx = need_w_ih ? SavedTensor(xs) : SavedTensor();
    SavedTensor sw_ih = need_x ? SavedTensor(w_ih) : SavedTensor();
    SavedTensor sh0 = h_init, sc0 = c_init, sw_hh = w_hh, sgates = gates, sh = h_all, sc = c_all, slens = lens,
                smask = mask;
    record(
        "lstm", {x, h0, c0, w_ih, w_hh, b_ih, b_hh}, {out.output, out.h_n, out.c_n},
        [=](const std::vector<Tensor>& grads) {
          Tensor h_all_ = sh.get(), c_all_ = sc.get(), gates_ = sgates.get(), lens_ = slens.get();
          Tensor w_hh_ = sw_hh.get(), h_init_ = sh0.get();
          const Device dev = gates_.device();
          const DType dt = gates_.dtype();
          // The weight gradients' products in the forward's precision too.
          auto gemm_ = [&](const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
            gemm_as("lstm", products, a, b, out, alpha, beta);
          };
          auto cell_back = TG_KERNEL(dev, lstm_cell_backward);
          auto add_kernel = TG_KERNEL(dev, binary);
          auto copy_kernel = TG_KERNEL(dev, copy);
          // An output nothing used arrives undefined (recorded with materialize_grads = false)
          // and reads as zeros. g_out is read through its strides.
          Tensor g_out = grads[0];
          if (g_out.defined() && g_out.dtype() != dt) g_out = g_out.to(dt);
          if (g_out.defined() && smask.defined()) g_out = mul(g_out, smask.get());  // padded outputs were constants
          // The last state's gradients, read where they are (undefined: zeros).
          Tensor g_h_n = grads[1].defined() && grads[1].dtype() != dt ? grads[1].to(dt) : grads[1];
          Tensor g_c_n = grads[2].defined() && grads[2].dtype() != dt ? grads[2].to(dt) : grads[2];
          // Running state gradients, ending as those of h0 and c0: fresh buffers, never the incoming tensors.
          Tensor dh = empty_tensor({batch, hidden}, dt, dev), dc = empty_tensor({batch, hidden}, dt, dev);
          Tensor dgates = empty_tensor(gates_.sizes(), dt, dev);  // [T, B, 4H], every step kept
          auto time = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
          Tensor c_init_ = sc0.get();
          Tensor db_ih, db_hh;  // the bias gradient (both): the sum of dgates over steps and rows
          auto recurrence = backend::kernels(dev).lstm_recurrence_backward;
          if (recurrence != nullptr) {
            if (need_b_ih) db_ih = empty_tensor({gates_width}, dt, dev);
            if (need_b_hh) db_hh = empty_tensor({gates_width}, dt, dev);
            recurrence(gates_, w_hh_.contiguous(), c_init_, c_all_, g_out, g_h_n, g_c_n, dh, dc, dgates, db_ih, db_hh,
                       lens_, reverse, products);
          } else {
            for (int k : {1, 2}) {
              const Tensor& from = k == 1 ? g_h_n : g_c_n;
              const Tensor& state_grad = k == 1 ? dh : dc;
              if (state_grad.numel() == 0) continue;
              if (from.defined())
                copy_kernel(from, state_grad);
              else
                TG_KERNEL(dev, fill)(state_grad, 0.0);
            }
            if (!g_out.defined()) g_out = zeros({}, TensorOptions(dt).device(dev)).expand({steps, batch, hidden});
            TimeSlice g_out_at(g_out), c_prev_at(c_all_), c_new_at(c_all_), gates_at(gates_), dgates_at(dgates);
            for (int64_t s = steps - 1; s >= 0; --s) {
              const int64_t t = time(s);
              if (dh.numel() > 0) add_kernel(backend::BinaryOp::Add, dh, g_out_at.at(t), dh);
              const Tensor& c_prev = s == 0 ? c_init_ : c_prev_at.at(time(s - 1));
              const Tensor& dg = dgates_at.at(t);
              cell_back(gates_at.at(t), c_prev, c_new_at.at(t), dh, dc, dg, lens_, t);
              gemm_(dg, w_hh_, dh, 1.0, 1.0);  // dh_prev += dgates @ W_hh
            }
          }
          if ((need_b_ih || need_b_hh) && recurrence == nullptr) {
            Tensor db = column_sum(dgates.view({steps * batch, gates_width}));
            db_ih = need_b_ih ? db : Tensor();
            db_hh = need_b_hh ? db : Tensor();
          }
          // Under autocast the products below all read dgates in the low type: rounded once here
          // rather than by each of them (on the CPU each rounding is a pass over T x B x 4H
          // floats, a third of them by columns), and the float32 copy freed.
          if (products != dt && dgates.numel() > 0) dgates = dgates.to(products);
          Tensor dg2 = dgates.view({steps * batch, gates_width});
          Tensor dx, dw_ih, dw_hh;
          if (need_x) {
            dx = empty_tensor({steps, batch, input_size}, dt, dev);
            gemm_(dg2, sw_ih.get(), dx.view({steps * batch, input_size}), 1.0, 0.0);
          }
          if (need_w_ih) {
            dw_ih = empty_tensor({gates_width, input_size}, dt, dev);
            gemm_(dg2.t(), sx.get().view({steps * batch, input_size}), dw_ih, 1.0, 0.0);
          }
          if (need_w_hh) {
            // sum over t of dgates[t]^T h_prev(t): the step that started from h0 is one small GEMM,
            // every other step read h_all at the neighbouring time (one large GEMM on views).
            dw_hh = empty_tensor({gates_width, hidden}, dt, dev);
            if (steps == 0) {
              gemm_(dg2.t(), h_all_.view({0, hidden}), dw_hh, 1.0, 0.0);  // k = 0: zeros
            } else {
              gemm_(dgates.select(0, time(0)).t(), h_init_, dw_hh, 1.0, 0.0);
              if (steps > 1) {
                const int64_t rows = (steps - 1) * batch;
                Tensor dg_rest = dgates.narrow(0, reverse ? 0 : 1, steps - 1).view({rows, gates_width});
                Tensor h_rest = h_all_.narrow(0, reverse ? 1 : 0, steps - 1).view({rows, hidden});
                gemm_(dg_rest.t(), h_rest, dw_hh, 1.0, 1.0);
              }
            }
          }
          return std::vector<Tensor>{dx, need_h0 ? dh : Tensor(), need_c0 ? dc : Tensor(), dw_ih, dw_hh, db_ih, db_hh};
        },
        /*materialize_grads=*/false);
  }
  return out;
}

}  // namespace tapegrad
