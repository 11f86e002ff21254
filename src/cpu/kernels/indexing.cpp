// index_select / index_add / gather / scatter_add on the CPU. Indices were range-checked by the ops.
#include <cstring>

#include "backend/around_dim.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/register.h"

namespace tapegrad::cpu {

using backend::Around;
using backend::around;

namespace {

// Visits every element of `index` (contiguous) with its coordinates split as (outer, at, inner).
template <class F>
void for_each_index(const Tensor& index, int64_t dim, const F& f) {
  Around a = around(index.sizes(), dim);
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t j = 0; j < a.extent; ++j)
      for (int64_t i = 0; i < a.inner; ++i) f(o, j, i, idx[(o * a.extent + j) * a.inner + i]);
}

// Overwrites out. x, index and out contiguous.
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out,
                  backend::DeviceCheck /*check: the op checked on the host*/) {
  Around a = around(x.sizes(), dim);
  const int64_t count = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  const size_t row_bytes = static_cast<size_t>(a.inner) * x.itemsize();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, a.outer * count, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(a.inner, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t job = b; job < e; ++job) {
                   int64_t o = job / count, k = job % count;
                   std::memcpy(dst + job * row_bytes, src + (o * a.extent + idx[k]) * row_bytes, row_bytes);
                 }
               });
}

// Accumulates: out[.., index[k], ..] += src[.., k, ..]. Parallel over the outer and inner dims, so
// duplicate indices never race.
void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
               backend::DeviceCheck /*check: the op checked on the host*/) {
  Around a = around(out.sizes(), dim);
  const int64_t count = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  dispatch_numeric(out.dtype(), "index_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    const T* s = static_cast<const T*>(src.data_ptr());
    constexpr int64_t kStrip = 1024;
    int64_t strips = (a.inner + kStrip - 1) / kStrip;
    parallel_for(0, a.outer * strips, 1, [&](int64_t b, int64_t e) {
      for (int64_t job = b; job < e; ++job) {
        int64_t outer = job / strips, i0 = (job % strips) * kStrip, i1 = std::min(a.inner, i0 + kStrip);
        for (int64_t k = 0; k < count; ++k) {
          T* dst = o + (outer * a.extent + idx[k]) * a.inner;
          const T* from = s + (outer * count + k) * a.inner;
          for (int64_t i = i0; i < i1; ++i) dst[i] += from[i];
        }
      }
    });
  });
}

// Overwrites out (shape of index). x, index, out contiguous.
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out,
            backend::DeviceCheck /*check: the op checked on the host*/) {
  Around xa = around(x.sizes(), dim);
  Around ia = around(index.sizes(), dim);
  dispatch_all(x.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    // x's inner extent may be larger than index's: address x with its own inner size.
    for_each_index(index, dim, [&](int64_t outer, int64_t j, int64_t i, int64_t at) {
      o[(outer * ia.extent + j) * ia.inner + i] = src[(outer * xa.extent + at) * xa.inner + i];
    });
  });
}

// Accumulates: out[.., index[..], ..] += src[..]. Serial: duplicate indices may collide.
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src,
                 backend::DeviceCheck /*check: the op checked on the host*/) {
  Around oa = around(out.sizes(), dim);
  Around ia = around(index.sizes(), dim);
  Around sa = around(src.sizes(), dim);
  dispatch_numeric(out.dtype(), "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    const T* s = static_cast<const T*>(src.data_ptr());
    (void)ia;
    for_each_index(index, dim, [&](int64_t outer, int64_t j, int64_t i, int64_t at) {
      o[(outer * oa.extent + at) * oa.inner + i] += s[(outer * sa.extent + j) * sa.inner + i];
    });
  });
}

}  // namespace

void register_indexing(backend::KernelTable& t) {
  t.index_select = index_select;
  t.index_add = index_add;
  t.gather = gather;
  t.scatter_add = scatter_add;
}

}  // namespace tapegrad::cpu
