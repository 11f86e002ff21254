// The loop under every CPU pointwise kernel. N operands of one shape, each with its own strides
// (stride 0 for a broadcast dim), are walked in row-major order. Dims that are contiguous for all
// operands are merged first, so the common cases become one flat loop the compiler vectorises.
#pragma once

#include <array>
#include <vector>

#include "cpu/parallel.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// inner(ptrs, strides, n): process n elements starting at ptrs[k], stepping strides[k] bytes.
template <size_t N, class Inner>
void for_each_strided(const std::array<const Tensor*, N>& operands, const Inner& inner,
                      int64_t grain = kGrainSize) {
  const Shape& sizes = operands[0]->sizes();
  int64_t numel = shape_numel(sizes);
  if (numel == 0) return;
  // Innermost dim first, size-1 dims dropped, mergeable neighbours merged.
  std::vector<int64_t> dim_sizes;
  std::vector<std::array<int64_t, N>> dim_strides;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k)
      s[k] = operands[k]->strides()[d] * static_cast<int64_t>(operands[k]->itemsize());
    if (!dim_sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k) mergeable = mergeable && s[k] == dim_strides.back()[k] * dim_sizes.back();
      if (mergeable) {
        dim_sizes.back() *= sizes[d];
        continue;
      }
    }
    dim_sizes.push_back(sizes[d]);
    dim_strides.push_back(s);
  }
  if (dim_sizes.empty()) {
    dim_sizes.push_back(1);
    dim_strides.push_back(std::array<int64_t, N>{});
  }
  std::array<char*, N> base;
  for (size_t k = 0; k < N; ++k) base[k] = static_cast<char*>(operands[k]->data_ptr());
  const size_t ndim = dim_sizes.size();

  parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(ndim);
    std::array<char*, N> ptrs = base;
    int64_t rest = begin;
    for (size_t d = 0; d < ndim; ++d) {
      index[d] = rest % dim_sizes[d];
      rest /= dim_sizes[d];
      for (size_t k = 0; k < N; ++k) ptrs[k] += index[d] * dim_strides[d][k];
    }
    for (int64_t i = begin; i < end;) {
      int64_t run = std::min(end - i, dim_sizes[0] - index[0]);
      inner(ptrs.data(), dim_strides[0].data(), run);
      i += run;
      index[0] += run;
      for (size_t k = 0; k < N; ++k) ptrs[k] += run * dim_strides[0][k];
      for (size_t d = 0; d + 1 < ndim && index[d] == dim_sizes[d]; ++d) {
        index[d] = 0;
        index[d + 1] += 1;
        for (size_t k = 0; k < N; ++k) ptrs[k] += dim_strides[d + 1][k] - dim_sizes[d] * dim_strides[d][k];
      }
    }
  });
}

// out = f(x) elementwise.
template <class Out, class In, class F>
void map_unary(const Tensor& out, const Tensor& x, const F& f) {
  for_each_strided<2>({&out, &x}, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      const In* a = reinterpret_cast<const In*>(p[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
    }
  });
}

// out = f(a, b) elementwise, with flat paths for contiguous operands and a broadcast scalar b.
template <class Out, class In, class F>
void map_binary(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  for_each_strided<3>({&out, &a, &b}, [&](char** p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    const In* y = reinterpret_cast<const In*>(p[2]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == sizeof(In)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == 0) {
      const In scalar = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], scalar);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const In*>(p[1] + i * s[1]), *reinterpret_cast<const In*>(p[2] + i * s[2]));
    }
  });
}

// out = f(a, b, c) elementwise (strided path only; used by backward kernels and where).
template <class Out, class A, class B, class C, class F>
void map_ternary(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, const F& f) {
  for_each_strided<4>({&out, &a, &b, &c}, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B) && s[3] == sizeof(C)) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      const A* x = reinterpret_cast<const A*>(p[1]);
      const B* y = reinterpret_cast<const B*>(p[2]);
      const C* z = reinterpret_cast<const C*>(p[3]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i], z[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]),
              *reinterpret_cast<const C*>(p[3] + i * s[3]));
    }
  });
}

}  // namespace tapegrad::cpu
