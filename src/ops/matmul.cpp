// mm, bmm, addmm, matmul and linear. Backward of C = A B: dA = dC B^T, dB = A^T dC; the
// transposes are views the GEMM reads through strides. Under autocast (amp/autocast.h) mm, addmm,
// matmul and linear take float32 or low-precision operands, run their products in the low type with
// float32 sums, and return the low type, as PyTorch's autocast does; backward's products use the
// same precision (the choice is made when the forward runs and kept by its tape node), and each
// gradient is computed straight into its input's dtype (a float32 weight's gradient keeps its
// float32 sums).
#include "amp/policy.h"
#include "ops/op_helpers.h"
#include "tapegrad/amp/autocast.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/linalg.h"

namespace tapegrad {

using namespace ops;

namespace {

void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b, int64_t rank) {
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  check_same_device(op, a, b);
  TG_CHECK(a.dim() == rank && b.dim() == rank, op, ": expected ", rank, "-D operands, got ", shape_str(a.sizes()),
           " and ", shape_str(b.sizes()));
  check_floating(op, a);
  check_floating(op, b);
  TG_CHECK(a.size(-1) == b.size(-2), op, ": shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
           " cannot be multiplied (", a.size(-1), " != ", b.size(-2), ")");
}

// dst [rows, cols] in `dtype` = a @ b with the products in `products`: a backward's gradient,
// computed straight into its input's dtype. No autograd.
Tensor product_into(DType dtype, DType products, const Tensor& a, const Tensor& b) {
  Tensor out = empty_tensor({a.size(0), b.size(1)}, dtype, a.device());
  if (out.numel() > 0) gemm_as("mm", products, a, b, out, 1.0, 0.0);
  return out;
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("mm", a, b, 2);
  const DType products = amp::autocast_inputs(amp::AutocastOp::mm, {&a, &b}).products;
  Tensor out = empty_tensor({a.size(0), b.size(1)}, products, a.device());
  gemm_as("mm", products, a, b, out, 1.0, 0.0);
  if (any_requires_grad({a, b})) {
    SavedTensor sa = b.requires_grad() ? SavedTensor(a) : SavedTensor();
    SavedTensor sb = a.requires_grad() ? SavedTensor(b) : SavedTensor();
    const DType a_type = a.dtype(), b_type = b.dtype();
    const bool same = a_type == products && b_type == products;
    record("mm", {a, b}, {out}, [sa, sb, products, a_type, b_type, same](const std::vector<Tensor>& g) {
      if (same && g[0].dtype() == products) {  // recorded, so double backward works
        const amp::AutocastGuard plain(g[0].device(), kBFloat16, false);
        return std::vector<Tensor>{sb.defined() ? mm(g[0], sb.get().t()) : Tensor(),
                                   sa.defined() ? mm(sa.get().t(), g[0]) : Tensor()};
      }
      return std::vector<Tensor>{sb.defined() ? product_into(a_type, products, g[0], sb.get().t()) : Tensor(),
                                 sa.defined() ? product_into(b_type, products, sa.get().t(), g[0]) : Tensor()};
    });
  }
  return out;
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  check_matmul_operands("bmm", a_in, b_in, 3);
  // Under autocast both operands in the low type (recorded casts), as PyTorch's autocast does.
  const DType products = amp::autocast_inputs(amp::AutocastOp::bmm, {&a_in, &b_in}).products;
  const Tensor a = cast(a_in, products), b = cast(b_in, products);
  TG_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: ", shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  Tensor out = empty_tensor({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  if (out.numel() > 0) TG_KERNEL(a.device(), bmm)(a, b, out, 1.0, 0.0);
  if (any_requires_grad({a, b})) {
    SavedTensor sa = b.requires_grad() ? SavedTensor(a) : SavedTensor();
    SavedTensor sb = a.requires_grad() ? SavedTensor(b) : SavedTensor();
    record("bmm", {a, b}, {out}, [sa, sb](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{sb.defined() ? bmm(g[0], sb.get().transpose(1, 2)) : Tensor(),
                                 sa.defined() ? bmm(sa.get().transpose(1, 2), g[0]) : Tensor()};
    });
  }
  return out;
}

Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, double beta, double alpha) {
  check_matmul_operands("addmm", a, b, 2);
  check_defined("addmm", input, "input");
  check_same_device("addmm", input, a);
  check_floating("addmm", input);
  const DType products = amp::autocast_inputs(amp::AutocastOp::addmm, {&input, &a, &b}).products;
  Shape shape{a.size(0), b.size(1)};
  TG_CHECK(broadcast_shapes("addmm", input.sizes(), shape) == shape, "addmm: input of shape ", shape_str(input.sizes()),
           " cannot be broadcast to ", shape_str(shape));
  Tensor out = empty_tensor(shape, products, a.device());
  if (beta != 0.0 && out.numel() > 0) TG_KERNEL(a.device(), copy)(expand_raw(input.detach(), shape), out);
  gemm_as("addmm", products, a, b, out, alpha, beta);  // accumulates onto the copied input
  if (any_requires_grad({input, a, b})) {
    SavedTensor sa = b.requires_grad() ? SavedTensor(a) : SavedTensor();
    SavedTensor sb = a.requires_grad() ? SavedTensor(b) : SavedTensor();
    Shape in_shape = input.sizes();
    bool need_input = input.requires_grad();
    const DType a_type = a.dtype(), b_type = b.dtype();
    const bool same = a_type == products && b_type == products;
    record("addmm", {input, a, b}, {out}, [=](const std::vector<Tensor>& g) {
      Tensor gi = need_input ? sum_to(beta == 1.0 ? g[0] : mul(g[0], beta), in_shape) : Tensor();
      Tensor ga, gb;
      if (same && g[0].dtype() == products) {  // recorded, so double backward works
        const amp::AutocastGuard plain(g[0].device(), kBFloat16, false);
        if (sb.defined()) ga = mm(g[0], sb.get().t());
        if (sa.defined()) gb = mm(sa.get().t(), g[0]);
      } else {
        if (sb.defined()) ga = product_into(a_type, products, g[0], sb.get().t());
        if (sa.defined()) gb = product_into(b_type, products, sa.get().t(), g[0]);
      }
      if (alpha != 1.0) {
        if (ga.defined()) ga = mul(ga, alpha);
        if (gb.defined()) gb = mul(gb, alpha);
      }
      return std::vector<Tensor>{gi, ga, gb};
    });
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined("matmul", a, "first operand");
  check_defined("matmul", b, "second operand");
  TG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", shape_str(a.sizes()),
           " and ", shape_str(b.sizes()));
  // Checked here so the message names matmul and the caller's shapes, not the mm/bmm it becomes.
  const int64_t k_a = a.size(-1), k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  TG_CHECK(k_a == k_b, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
           " cannot be multiplied (", k_a, " != ", k_b, ")");
  check_same_device("matmul", a, b);
  amp::autocast_inputs(amp::AutocastOp::matmul, {&a, &b}).products;  // the same dtype, or both autocast's
  if (a.dim() == 1 && b.dim() == 1) {
    return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  }
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (a.dim() == 1 && b.dim() == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (a.dim() == 2 && b.dim() == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
  if (a.dim() >= 3 && b.dim() <= 2) {
    // Fold the batch into the rows: one large GEMM (the common Linear case).
    Tensor rhs = b.dim() == 1 ? b.unsqueeze(1) : b;
    TG_CHECK(a.size(-1) == rhs.size(0), "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied");
    Shape out_shape(a.sizes().begin(), a.sizes().end() - 1);
    if (b.dim() == 2) out_shape.push_back(b.size(1));
    return mm(a.reshape({-1, a.size(-1)}), rhs).reshape(out_shape);
  }
  // General batched case: broadcast the batch dims, then one bmm.
  Tensor lhs = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor rhs = b.dim() == 1 ? b.unsqueeze(1) : b;
  Shape batch_a(lhs.sizes().begin(), lhs.sizes().end() - 2), batch_b(rhs.sizes().begin(), rhs.sizes().end() - 2);
  Shape batch = broadcast_shapes("matmul", batch_a, batch_b);
  const int64_t n = lhs.size(-2), k = lhs.size(-1), k2 = rhs.size(-2), m = rhs.size(-1);
  TG_CHECK(k == k2, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()), " cannot be multiplied");
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {n, k});
  eb.insert(eb.end(), {k, m});
  int64_t count = shape_numel(batch);
  Tensor out = bmm(lhs.expand(ea).reshape({count, n, k}), rhs.expand(eb).reshape({count, k, m}));
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(n);
  if (b.dim() > 1) out_shape.push_back(m);
  return out.reshape(out_shape);
}

// One tape node for x W^T + b. Forward: the output is preloaded with the broadcast bias and the
// GEMM accumulates onto it (beta = 1), so there is no separate bias pass. Backward, from g [n, out]:
// dx = g W and dW = g^T x (both read through strides, dW written straight in W's [out, in] layout,
// so no transpose node or copy follows), db = the column sum of g; each only when its input needs it.
// A backend with the gemm_bias slots (CUDA: cuBLASLt epilogues) adds the bias inside the forward
// GEMM and sums db inside the dW GEMM instead.
namespace {

void check_linear_inputs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined(op, x);
  check_defined(op, weight, "weight");
  TG_CHECK(weight.dim() == 2, op, ": weight must be 2-D [out, in], got ", shape_str(weight.sizes()));
  TG_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": input of shape ", shape_str(x.sizes()),
           " does not match weight ", shape_str(weight.sizes()), " (expected last dim ", weight.size(1), ")");
  check_same_device(op, x, weight);
  check_floating(op, x);
  check_floating(op, weight);
  if (bias.defined()) {
    TG_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias of shape ", shape_str(bias.sizes()),
             " does not match weight ", shape_str(weight.sizes()));
    check_same_device(op, x, bias);
  }
}

// A linear op of x [..., in] as op(rows) on x's leading dims folded into rows: one GEMM (the
// reshapes are their own tape nodes), the result [..., out].
template <class Op>
Tensor over_rows(const Tensor& x, const Tensor& weight, const Op& op) {
  Tensor rows = x.dim() == 1 ? x.unsqueeze(0) : x.reshape({-1, x.size(-1)});
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  out_shape.push_back(weight.size(0));
  return op(rows).reshape(out_shape);
}

// x [n, in] @ weight^T + bias into a new [n, out] tensor of type `products`, recording nothing;
// with `relu`, clamped as well (the backend's gemm_bias_relu where it has one).
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, DType products, bool relu) {
  const int64_t n = x.size(0), out_features = weight.size(0);
  const Device device = x.device();
  Tensor out = empty_tensor({n, out_features}, products, device);
  const backend::KernelTable& kernels = backend::kernels(device);
  if (relu && bias.defined() && kernels.gemm_bias_relu != nullptr) {
    kernels.gemm_bias_relu(x.detach(), weight.detach().t(), bias.detach().contiguous(), out, products);
    return out;
  }
  if (bias.defined() && kernels.gemm_bias != nullptr) {
    kernels.gemm_bias(x.detach(), weight.detach().t(), bias.detach().contiguous(), out, products);
  } else {
    double beta = 0.0;
    if (bias.defined() && out.numel() > 0) {
      TG_KERNEL(device, copy)(expand_raw(bias.detach(), out.sizes()), out);
      beta = 1.0;
    }
    gemm_as("linear", products, x.detach(), weight.detach().t(), out, 1.0, beta);
  }
  // In place: the output of the product above, still in cache for the small batches of serving.
  if (relu && out.numel() > 0) TG_KERNEL(device, unary)(backend::UnaryOp::Relu, {}, out, out);
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_inputs("linear", x, weight, bias);
  const DType products = amp::autocast_inputs(amp::AutocastOp::linear, {&x, &weight, &bias}).products;
  if (x.dim() != 2) return over_rows(x, weight, [&](const Tensor& rows) { return linear(rows, weight, bias); });
  Tensor out = linear_forward(x, weight, bias, products, /*relu=*/false);
  if (any_requires_grad({x, weight, bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    SavedTensor saved_x = need_w ? SavedTensor(x) : SavedTensor();
    SavedTensor saved_w = need_x ? SavedTensor(weight) : SavedTensor();
    // Each gradient in its input's dtype (under autocast a float32 weight's gradient keeps the
    // float32 sums); undefined inputs' types are never used.
    const DType x_type = x.dtype(), w_type = weight.dtype(), b_type = bias.defined() ? bias.dtype() : products;
    record("linear", {x, weight, bias}, {out}, [=](const std::vector<Tensor>& g) {
      const Tensor& grad = g[0];  // [n, out]
      const Device dev = grad.device();
      Tensor dx, dw, db;
      if (saved_w.defined()) {
        Tensor w = saved_w.get();
        dx = empty_tensor({grad.size(0), w.size(1)}, x_type, dev);
        gemm_as("linear", products, grad, w, dx, 1.0, 0.0);
      }
      if (saved_x.defined()) {
        Tensor xs = saved_x.get();
        dw = empty_tensor({grad.size(1), xs.size(1)}, w_type, dev);
        const auto fused = backend::kernels(dev).gemm_bias_grad;
        if (need_b && fused != nullptr) {
          db = empty_tensor({grad.size(1)}, b_type, dev);
          fused(grad.t(), xs, dw, db, products);
        } else {
          gemm_as("linear", products, grad.t(), xs, dw, 1.0, 0.0);
        }
      }
      if (need_b && !db.defined()) db = column_sum(grad, b_type);
      return std::vector<Tensor>{dx, dw, db};
    });
  }
  return out;
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_inputs("linear_relu", x, weight, bias);
  if (any_requires_grad({x, weight, bias})) return relu(linear(x, weight, bias));
  const DType products = amp::autocast_inputs(amp::AutocastOp::linear, {&x, &weight, &bias}).products;
  if (x.dim() != 2) return over_rows(x, weight, [&](const Tensor& rows) { return linear_relu(rows, weight, bias); });
  return linear_forward(x, weight, bias, products, /*relu=*/true);
}

}  // namespace tapegrad
