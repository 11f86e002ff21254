// The CPU's row-wise and reducing kernels for float16 and bfloat16 tensors: each 16-bit argument is
// widened into a float32 copy, the float32 kernel runs, and each 16-bit output is rounded back once,
// as PyTorch's CPU kernels accumulate 16-bit inputs in float. These kernels read whole rows or
// reduce across them, so unlike the pointwise loops (Note [16-bit operands] in strided_loop.h) they
// take the copies whole. Under autocast these ops run in float32 anyway; this is for 16-bit tensors
// used directly.
#include "cpu/widened_slots.h"

#include <algorithm>

#include "backend/kernel_tensors.h"
#include "cpu/convert_16bit.h"
#include "cpu/cpu_kernels.h"
#include "cpu/parallel.h"
#include "cpu/vec_math.h"

namespace tapegrad::cpu::widened {

namespace {

bool is_16bit(const Tensor& t) {
  return t.defined() && (t.dtype() == kBFloat16 || t.dtype() == kFloat16);
}

// A 16-bit argument's float32 stand-in; any other argument is used as it is. An input is widened
// when made; an output is rounded back into the argument by write_back().
class F32 {
 public:
  enum Role { kIn, kOut };
  F32(const Tensor& t, Role role, const char* op) : original_(t) {
    if (!is_16bit(t)) {
      stand_in_ = t;
      return;
    }
    stand_in_ = backend::allocate_tensor(t.sizes(), kFloat32, t.device(), op);
    if (role == kIn) copy(t, stand_in_);
  }
  operator const Tensor&() const { return stand_in_; }
  void write_back() const {
    if (stand_in_.defined() && stand_in_.impl() != original_.impl()) copy(stand_in_, original_);
  }

 private:
  Tensor original_, stand_in_;
};

// acc += row, widened to double: its own function so that it runs on the CPU's widest vectors
// (the rest of this file is baseline code), which made the column sums below 2x faster.
TG_VECTOR_CLONES void add_into_doubles(const float* row, double* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(row[i]);
}

// Note [16-bit column sums]: a sum or mean over the rows of a 16-bit [outer, reduced, inner] (a
// bias gradient under autocast: column_sum in ops/op_helpers.cpp) widens a strip of each row as it
// reads it and adds it into double sums, one pass over the 16-bit data instead of a whole float32
// copy first. The sums are float32 reduce's (each column in double, rows in order) and round the
// same way, so the result has the same bits. mlp_seed:1024's bf16 bias gradient (1024 x 512):
// 226 us as a widened copy and a matrix-vector product in the step, 79 us this way.
void sum_rows_16bit(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner) {
  constexpr int64_t kStrip = 256;
  const int64_t strips = (inner + kStrip - 1) / kStrip;
  const double scale = op == ReduceOp::Mean ? 1.0 / static_cast<double>(reduced) : 1.0;
  const char* in = static_cast<const char*>(x.data_ptr());
  char* result = static_cast<char*>(out.data_ptr());
  const bool wide_out = out.dtype() == kFloat32;
  parallel_for(0, outer * strips, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(reduced * kStrip, 1)),
               [&](int64_t begin, int64_t end) {
                 alignas(64) float row[kStrip];
                 double acc[kStrip];
                 for (int64_t job = begin; job < end; ++job) {
                   const int64_t o = job / strips, i0 = (job % strips) * kStrip, width = std::min(kStrip, inner - i0);
                   std::fill_n(acc, width, 0.0);
                   for (int64_t r = 0; r < reduced; ++r) {
                     widen_16bit(x.dtype(), in + ((o * reduced + r) * inner + i0) * 2, 2, row, width);
                     add_into_doubles(row, acc, width);
                   }
                   for (int64_t i = 0; i < width; ++i) row[i] = static_cast<float>(acc[i] * scale);
                   if (wide_out) {
                     std::copy_n(row, width, reinterpret_cast<float*>(result) + o * inner + i0);
                   } else {
                     narrow_16bit(out.dtype(), row, result + (o * inner + i0) * 2, 2, width);
                   }
                 }
               });
}

}  // namespace

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  const F32 o(out, F32::kOut, "uniform");
  cpu::uniform(o, low, high, seed, offset);
  o.write_back();
}

void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  const F32 o(out, F32::kOut, "normal");
  cpu::normal(o, mean, std, seed, offset);
  o.write_back();
}

void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner) {
  const bool sum = op == ReduceOp::Sum || op == ReduceOp::Mean;
  if (sum && is_16bit(x) && inner > 1 && reduced > 0 && (out.dtype() == kFloat32 || out.dtype() == x.dtype())) {
    sum_rows_16bit(op, x, out, outer, reduced, inner);  // Note [16-bit column sums]
    return;
  }
  const F32 in(x, F32::kIn, "reduce"), o(out, F32::kOut, "reduce");
  cpu::reduce(op, in, o, outer, reduced, inner);
  o.write_back();
}

void reduce_with_index(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer,
                       int64_t reduced, int64_t inner) {
  const F32 in(x, F32::kIn, "max/min"), v(values, F32::kOut, "max/min");
  cpu::reduce_with_index(op, in, v, indices, outer, reduced, inner);
  v.write_back();
}

void softmax(const Tensor& x, const Tensor& out, bool log) {
  const F32 in(x, F32::kIn, "softmax"), o(out, F32::kOut, "softmax");
  cpu::softmax(in, o, log);
  o.write_back();
}

void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log) {
  const F32 g(grad_out, F32::kIn, "softmax_backward"), in(y, F32::kIn, "softmax_backward"),
      o(grad_x, F32::kOut, "softmax_backward");
  cpu::softmax_backward(g, in, o, log);
  o.write_back();
}

void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& losses, const Tensor& logsumexp,
                   const Tensor& reduced, const Tensor& count, int64_t ignore_index, double label_smoothing) {
  const char* op = "cross_entropy";
  const F32 in(logits, F32::kIn, op), l(losses, F32::kOut, op), lse(logsumexp, F32::kOut, op),
      r(reduced, F32::kOut, op);
  cpu::cross_entropy(in, target, l, lse, r, count, ignore_index, label_smoothing);
  l.write_back();
  lse.write_back();
  r.write_back();
}

void cross_entropy_backward(const Tensor& grad_losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                            const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                            double label_smoothing) {
  const char* op = "cross_entropy_backward";
  const F32 g(grad_losses, F32::kIn, op), in(logits, F32::kIn, op), lse(logsumexp, F32::kIn, op),
      o(grad_logits, F32::kOut, op);
  cpu::cross_entropy_backward(g, count, in, target, lse, o, ignore_index, label_smoothing);
  o.write_back();
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm";
  const F32 in(x, F32::kIn, op), w(weight, F32::kIn, op), b(bias, F32::kIn, op), o(y, F32::kOut, op);
  cpu::layer_norm(in, w, b, eps, o, mean, rstd);
  o.write_back();
}

void layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                         const Tensor& grad_bias) {
  const char* op = "layer_norm_backward";
  const F32 g(grad_y, F32::kIn, op), in(x, F32::kIn, op), w(weight, F32::kIn, op), gx(grad_x, F32::kOut, op),
      gw(grad_weight, F32::kOut, op), gb(grad_bias, F32::kOut, op);
  cpu::layer_norm_backward(g, in, mean, rstd, w, gx, gw, gb);
  gx.write_back();
  gw.write_back();
  gb.write_back();
}

}  // namespace tapegrad::cpu::widened
