// Shared op helpers (see op_helpers.h).
#include "ops/op_helpers.h"

#include "backend/kernel_tensors.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad::ops {

Tensor empty_tensor(const Shape& sizes, DType dtype, Device device, const char* op) {
  return backend::allocate_tensor(sizes, dtype, device, op);
}

void check_value_fits(const char* op, double value, DType dtype) {
  // The bounds are exact doubles: -2^31 and 2^31, -2^63 and 2^63.
  if (dtype == kInt32) {
    TG_CHECK(value >= -2147483648.0 && value < 2147483648.0, op, ": ", value, " does not fit in ", dtype);
  } else if (dtype == kInt64) {
    TG_CHECK(value >= -9223372036854775808.0 && value < 9223372036854775808.0, op, ": ", value, " does not fit in ",
             dtype);
  }
}

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  Tensor view(base.storage(), offset, std::move(sizes), std::move(strides), base.dtype());
  view.impl()->is_view = true;
  return view;
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  TG_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TG_CHECK(a.device() == b.device(), op, ": expected all tensors on the same device, got ", a.device(), " and ",
           b.device());
}

void check_floating(const char* op, const Tensor& t) {
  TG_CHECK(t.is_floating_point(), op, ": expected a floating-point tensor, got ", t.dtype());
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TG_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  Tensor reduced = dims.empty() ? grad : sum(grad, dims, true);
  return reduced.reshape(shape);
}

Tensor column_sum(const Tensor& t, std::optional<DType> dtype) {
  TG_ASSERT(t.dim() == 2);
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor out = empty_tensor({1, cols}, dtype.value_or(t.dtype()), t.device());
  if (cols > 0 && (t.dtype() == kBFloat16 || t.dtype() == kFloat16) && t.device().is_cpu() && rows > 0) {
    // A 16-bit t on the CPU: the reduce kernel sums its rows in one pass, widening as it reads
    // (Note [16-bit column sums] in cpu/half/widening.cpp), into float32 sums.
    const Tensor rows_in = t.is_contiguous() ? t.detach() : backend::contiguous_copy(t, "sum");
    const Tensor sums = out.dtype() == kFloat32 ? out : empty_tensor({1, cols}, kFloat32, t.device());
    TG_KERNEL(t.device(), reduce)(backend::ReduceOp::Sum, rows_in, sums, 1, rows, cols);
    if (sums.impl() != out.impl()) TG_KERNEL(t.device(), copy)(sums, out);
  } else if (cols > 0) {
    Tensor ones = empty_tensor({1, rows}, t.dtype(), t.device());
    if (rows > 0) TG_KERNEL(t.device(), fill)(ones, 1.0);
    gemm_as("sum", t.dtype(), ones, t.detach(), out, 1.0, 0.0);
  }
  return out.view({cols});
}

Tensor expand_raw(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  Shape strides(shape.size(), 0);
  for (int64_t d = 0; d < t.dim(); ++d) strides[d + lead] = t.size(d) == 1 ? 0 : t.stride(d);
  return make_view(t, shape, strides, t.storage_offset());
}

Tensor cast(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : t.to(dtype);
}

void gemm_as(const char* op, DType products, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
             double beta) {
  const Device device = out.device();
  if (a.dtype() == products && b.dtype() == products && out.dtype() == products) {
    TG_KERNEL(device, gemm)(a, b, out, alpha, beta);
    return;
  }
  for (const Tensor* t : {&a, &b, &out})
    TG_CHECK(t->dtype() == kFloat32 || t->dtype() == products, op, ": no ", products, " products for ", t->dtype(),
             " tensors");
  TG_CHECK(products == kBFloat16 || products == kFloat16, op, ": no ", products, " products for ", a.dtype(), ", ",
           b.dtype(), " and ", out.dtype(), " tensors");
  auto mixed = backend::kernels(device).gemm_mixed;
  TG_CHECK(mixed != nullptr, op, ": autocast products on ", device.str(), " are not implemented yet");
  mixed(a, b, out, alpha, beta, products);
}

void check_inplace(const char* op, const Tensor& self, const Tensor& other) {
  check_inference_inplace(op, self);
  if (!autograd::grad_enabled()) return;
  bool needs = self.requires_grad() || (other.defined() && other.requires_grad());
  if (!needs) return;
  TG_CHECK(!(self.requires_grad() && self.is_leaf()), op,
           ": a leaf tensor that requires grad cannot be modified in place (do the update under NoGradGuard)");
  TG_CHECK(!self.impl()->is_view, op,
           ": in-place modification of a view is not supported when gradients are needed; use the "
           "out-of-place op");
}

void check_inference_inplace(const char* op, const Tensor& self) {
  TG_CHECK(!self.is_inference() || autograd::inference_mode_enabled(), op, ": in-place update of an inference tensor ",
           shape_str(self.sizes()),
           " (made under InferenceMode) outside InferenceMode; clone() it first, or update it inside InferenceMode");
}

void adopt_result(Tensor& self, const Tensor& result) {
  {
    autograd::NoGradGuard no_grad;
    TG_KERNEL(self.device(), copy)(result, self);
  }
  self.storage()->bump_version();
  TensorImpl* s = self.impl();
  if (s->retains_grad && s->grad_fn) s->grad_fn->drop_retained(s);
  s->grad_fn = result.impl()->grad_fn;
  s->output_nr = result.impl()->output_nr;
  s->requires_grad = result.requires_grad();
  if (s->retains_grad && s->grad_fn) s->grad_fn->retain_output_grad(s->output_nr, self.impl_ptr());
}

std::string describe(const Tensor& t) {
  return detail::str_cat(t.dtype(), " ", shape_str(t.sizes()), " on ", t.device());
}

}  // namespace tapegrad::ops
