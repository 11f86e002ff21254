// cat and stack copy pieces into one new tensor (the backward narrows the gradient back);
// split and chunk are narrow views.
#include "tapegrad/ops/join.h"

#include "ops/op_helpers.h"

namespace tapegrad {

using namespace ops;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TG_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) check_defined("cat", tensors[i], "a listed tensor");
  const Tensor& first = tensors[0];
  TG_CHECK(first.dim() > 0, "cat: zero-dimensional tensors cannot be concatenated (use stack)");
  int64_t d = wrap_dim("cat", dim, first.dim());
  DType dt = first.dtype();
  for (const Tensor& t : tensors) dt = promote_types(dt, t.dtype());
  Shape shape = first.sizes();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_same_device("cat", first, t);
    TG_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has shape ", shape_str(t.sizes()), ", tensor 0 has ",
             shape_str(first.sizes()), " (ranks differ)");
    for (int64_t k = 0; k < t.dim(); ++k)
      TG_CHECK(k == d || t.size(k) == first.size(k), "cat: tensor ", i, " has shape ", shape_str(t.sizes()),
               ", tensor 0 has ", shape_str(first.sizes()), "; they may differ only in dim ", d);
    TG_CHECK(!__builtin_add_overflow(shape[d], t.size(d), &shape[d]), "cat: the sizes in dim ", d,
             " add up to more than int64 can count");
  }
  Tensor out = empty_tensor(shape, dt, first.device());
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) TG_KERNEL(out.device(), copy)(t.detach(), out.detach().narrow(d, offset, t.size(d)));
    offset += t.size(d);
    sizes.push_back(t.size(d));
  }
  if (any_requires_grad(tensors)) {
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
    record("cat", tensors, {out}, [d, sizes, dtypes](const std::vector<Tensor>& g) {
      std::vector<Tensor> grads;
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(cast(g[0].narrow(d, at, sizes[i]), dtypes[i]));
        at += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (const Tensor& t : tensors) check_defined("stack", t, "a listed tensor");
  int64_t d = wrap_dim("stack", dim, tensors[0].dim() + 1);
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TG_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: tensor ", i, " has shape ",
             shape_str(tensors[i].sizes()), ", tensor 0 has ", shape_str(tensors[0].sizes()), " (all must be equal)");
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined("split", x);
  TG_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  TG_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  int64_t d = wrap_dim("split", dim, x.dim());
  std::vector<Tensor> pieces;
  // Each step is at most what is left, so `start` never passes the size (no overflow near 2^63).
  for (int64_t start = 0, n = x.size(d); start < n;) {
    const int64_t length = std::min(split_size, n - start);
    pieces.push_back(x.narrow(d, start, length));
    start += length;
  }
  if (pieces.empty()) pieces.push_back(x);
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined("split", x);
  TG_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  int64_t d = wrap_dim("split", dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    TG_CHECK(s >= 0, "split: negative section size ", s);
    TG_CHECK(!__builtin_add_overflow(total, s, &total), "split: sizes ", shape_str(sizes),
             " add up to more than int64 can count");
  }
  TG_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " add up to ", total, ", but dim ", d, " has size ",
           x.size(d));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(x.narrow(d, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined("chunk", x);
  TG_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  TG_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  int64_t d = wrap_dim("chunk", dim, x.dim());
  const int64_t n = x.size(d);
  const int64_t size = n / chunks + (n % chunks != 0 ? 1 : 0);  // ceil without n + chunks - 1 overflowing
  return split(x, std::max<int64_t>(size, 1), d);
}

}  // namespace tapegrad
