// View ops: new geometry over the same storage, no copy. Each records a backward that maps the
// gradient back to the input's geometry.
#include <algorithm>
#include <optional>

#include "ops/op_helpers.h"
#include "tapegrad/ops/creation.h"

namespace tapegrad {

using namespace ops;

namespace {

Shape infer_size(const char* op, const Shape& requested, int64_t numel) {
  Shape out = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TG_CHECK(infer_at < 0, op, ": only one dimension can be -1 in ", shape_str(requested));
      infer_at = static_cast<int64_t>(i);
    } else {
      TG_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(requested));
      // Once a product passes int64 no shape can match numel unless a later size is 0.
      if (known != 0 && __builtin_mul_overflow(known, out[i], &known)) {
        bool has_zero = false;
        for (int64_t s : out) has_zero = has_zero || s == 0;
        TG_CHECK(has_zero, op, ": shape ", shape_str(requested), " is invalid for an input of ", numel, " elements");
        known = 0;
      }
    }
  }
  if (infer_at >= 0) {
    TG_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(requested), " is invalid for ", numel,
             " elements");
    out[infer_at] = numel / known;
  }
  TG_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(requested), " is invalid for an input of ", numel,
           " elements", " elements");
  return out;
}

// Strides for viewing (sizes, strides) as `shape` without a copy, if possible (PyTorch's rule:
// each run of dims that is contiguous in memory may be split and merged freely).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  Shape result(shape.size());
  if (sizes.empty()) return Shape(shape.size(), 1);
  if (shape_numel(sizes) == 0) return contiguous_strides(shape);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= sizes[tensor_d];
    if (tensor_d == 0 || (sizes[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        result[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return result;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = infer_size("view", requested, numel());
  std::optional<Shape> strides = view_strides(sizes(), this->strides(), shape);
  TG_CHECK(strides.has_value(), "view: shape ", shape_str(shape), " is not compatible with the input's size ",
           shape_str(sizes()), " and strides ", shape_str(this->strides()), "; use reshape() instead");
  Tensor out = make_view(*this, shape, *strides, storage_offset());
  if (any_requires_grad({*this})) {
    Shape in_shape = sizes();
    record("view", {*this}, {out},
           [in_shape](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].reshape(in_shape)}; });
  }
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = infer_size("reshape", requested, numel());
  if (view_strides(sizes(), strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = wrap_dim("flatten", start_dim, dim()), e = wrap_dim("flatten", end_dim, dim());
  TG_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape(sizes().begin(), sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= size(d);
  shape.push_back(merged);
  shape.insert(shape.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::permute(const Shape& dims) const {
  TG_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: expected ", dim(), " dims, got ", shape_str(dims));
  Shape order(dims.size()), sz(dims.size()), st(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim("permute", dims[i], dim());
    TG_CHECK(!used[d], "permute: dim ", d, " repeats in ", shape_str(dims));
    used[d] = true;
    order[i] = d;
    sz[i] = size(d);
    st[i] = stride(d);
  }
  Tensor out = make_view(*this, sz, st, storage_offset());
  if (any_requires_grad({*this})) {
    Shape inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
    record("permute", {*this}, {out},
           [inverse](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() == 0) return *this;
  Shape order(static_cast<size_t>(dim()));
  for (int64_t d = 0; d < dim(); ++d) order[d] = d;
  std::swap(order[wrap_dim("transpose", dim0, dim())], order[wrap_dim("transpose", dim1, dim())]);
  return permute(order);
}

Tensor Tensor::t() const {
  TG_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got ", shape_str(sizes()), "; use transpose()");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  TG_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  int64_t d = wrap_dim("slice", dim_, dim());
  TG_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sz = sizes(), st = strides();
  // A step past the range takes one element: clamping it keeps the arithmetic below in int64
  // (slice(0, 0, 5, INT64_MAX) overflowed both the count and the stride).
  const int64_t taken_step = std::min(step, std::max<int64_t>(end - start, 1));
  sz[d] = end > start ? (end - start - 1) / taken_step + 1 : 0;
  st[d] *= taken_step;
  Tensor out = make_view(*this, sz, st, storage_offset() + start * stride(d));
  if (any_requires_grad({*this})) {
    Shape in_shape = sizes();
    DType dt = dtype();
    Device dev = device();
    record("slice", {*this}, {out}, [=](const std::vector<Tensor>& g) {
      Tensor grad = zeros(in_shape, TensorOptions(dt).device(dev));
      grad.slice(d, start, end, step).copy_(g[0]);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  TG_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int64_t d = wrap_dim("narrow", dim_, dim());
  int64_t n = size(d);
  if (start < 0) start += n;
  TG_CHECK(start >= 0 && length >= 0 && length <= n - start, "narrow: start ", start, " and length ", length,
           " exceed dim ", d, " of size ", n, " (shape ", shape_str(sizes()), ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  TG_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  int64_t d = wrap_dim("select", dim_, dim());
  int64_t n = size(d);
  TG_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n,
           " (shape ", shape_str(sizes()), ")");
  if (index < 0) index += n;
  Shape sz = sizes(), st = strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, sz, st, storage_offset() + index * stride(d));
  if (any_requires_grad({*this})) {
    Shape in_shape = sizes();
    DType dt = dtype();
    Device dev = device();
    record("select", {*this}, {out}, [=](const std::vector<Tensor>& g) {
      // A dim of size 1 holds only the selected slice: its gradient is the incoming one, viewed
      // (nodes read gradients through their strides and never write into them).
      if (in_shape[static_cast<size_t>(d)] == 1) return std::vector<Tensor>{g[0].unsqueeze(d)};
      Tensor grad = zeros(in_shape, TensorOptions(dt).device(dev));
      grad.select(d, index).copy_(g[0]);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor Tensor::squeeze() const {
  Shape shape;
  for (int64_t s : sizes())
    if (s != 1) shape.push_back(s);
  return shape.size() == sizes().size() ? *this : view(shape);
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  int64_t d = wrap_dim("squeeze", dim_, dim());
  if (size(d) != 1) return *this;
  Shape shape = sizes();
  shape.erase(shape.begin() + d);
  return view(shape);
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int64_t d = wrap_dim("unsqueeze", dim_, dim() + 1);
  Shape shape = sizes();
  shape.insert(shape.begin() + d, 1);
  return view(shape);
}

Tensor Tensor::expand(const Shape& requested) const {
  TG_CHECK(static_cast<int64_t>(requested.size()) >= dim(), "expand: the target ", shape_str(requested),
           " has fewer dims than the input ", shape_str(sizes()));
  const int64_t lead = static_cast<int64_t>(requested.size()) - dim();
  Shape shape(requested.size()), st(requested.size(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(requested.size()); ++i) {
    int64_t want = requested[i];
    if (i < lead) {
      TG_CHECK(want >= 0, "expand: size -1 is not allowed for a new leading dim in ", shape_str(requested));
      shape[i] = want;
      continue;
    }
    int64_t have = size(i - lead);
    if (want == -1) want = have;
    TG_CHECK(want >= 0, "expand: negative size ", want, " in ", shape_str(requested),
             " (only -1, keep the size, is allowed)");
    TG_CHECK(have == want || have == 1, "expand: cannot expand ", shape_str(sizes()), " to ", shape_str(requested),
             " (dim ", i, ": ", have, " to ", want, ")");
    shape[i] = want;
    st[i] = have == want ? stride(i - lead) : 0;
  }
  checked_numel("expand", shape);  // a view whose element count overflows would break every loop over it
  Tensor out = make_view(*this, shape, st, storage_offset());
  if (any_requires_grad({*this})) {
    Shape in_shape = sizes();
    record("expand", {*this}, {out},
           [in_shape](const std::vector<Tensor>& g) { return std::vector<Tensor>{sum_to(g[0], in_shape)}; });
  }
  return out;
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

}  // namespace tapegrad
