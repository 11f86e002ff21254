// The loop under every CPU pointwise kernel. N operands of one shape, each with its own strides
// (stride 0 for a broadcast dim), are walked in row-major order. Dims that are contiguous for all
// operands are merged first, so the common cases become one flat loop the compiler vectorises.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "cpu/half/convert_16bit.h"
#include "cpu/loops/parallel.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// inner(ptrs, strides, n): process n elements starting at ptrs[k], stepping strides[k] bytes.
template <size_t N, class Inner>
void for_each_strided(const std::array<const Tensor*, N>& operands, const Inner& inner, int64_t grain = kGrainSize) {
  const Shape& sizes = operands[0]->sizes();
  int64_t numel = shape_numel(sizes);
  if (numel == 0) return;
  // Innermost dim first, size-1 dims dropped, mergeable neighbours merged.
  std::vector<int64_t> dim_sizes;
  std::vector<std::array<int64_t, N>> dim_strides;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = operands[k]->strides()[d] * static_cast<int64_t>(operands[k]->itemsize());
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

// Note [16-bit operands]: a pointwise kernel has one body per compute type, and float16 and
// bfloat16 tensors run the float body, as PyTorch's CPU kernels do. for_each_compute hands `inner`
// (written for operands of compute_sizes bytes) blocks of each run: every 16-bit input widened into
// a float buffer on the stack, and the output block (operand 0) rounded back once, so values see
// float arithmetic and a single rounding. The blocks stay in L1, and a contiguous run converts with
// vector instructions (convert_16bit.h). Operands already of their compute size are passed through.
template <size_t N, class Inner>
void for_each_compute(const std::array<const Tensor*, N>& operands, const std::array<size_t, N>& compute_sizes,
                      const Inner& inner, int64_t grain = kGrainSize) {
  std::array<DType, N> widened;  // kFloat32 where the operand is used as it is
  bool any = false;
  for (size_t k = 0; k < N; ++k) {
    const DType dtype = operands[k]->dtype();
    const bool narrow = (dtype == kBFloat16 || dtype == kFloat16) && compute_sizes[k] == sizeof(float);
    widened[k] = narrow ? dtype : kFloat32;
    any = any || narrow;
  }
  if (!any) return for_each_strided<N>(operands, inner, grain);
  for_each_strided<N>(
      operands,
      [&](char** p, const int64_t* s, int64_t n) {
        constexpr int64_t kBlock = 256;
        alignas(64) float buffers[N][kBlock];
        for (int64_t start = 0; start < n; start += kBlock) {
          const int64_t m = std::min(kBlock, n - start);
          std::array<char*, N> q;
          std::array<int64_t, N> qs;
          for (size_t k = 0; k < N; ++k) {
            if (widened[k] == kFloat32) {
              q[k] = p[k] + start * s[k];
              qs[k] = s[k];
              continue;
            }
            q[k] = reinterpret_cast<char*>(buffers[k]);
            qs[k] = sizeof(float);
            if (k > 0) widen_16bit(widened[k], p[k] + start * s[k], s[k], buffers[k], m);
          }
          inner(q.data(), qs.data(), m);
          if (widened[0] != kFloat32) narrow_16bit(widened[0], buffers[0], p[0] + start * s[0], s[0], m);
        }
      },
      grain);
}

// out = f(x) elementwise.
template <class Out, class In, class F>
void map_unary(const Tensor& out, const Tensor& x, const F& f) {
  for_each_compute<2>({&out, &x}, {sizeof(Out), sizeof(In)}, [&](char** p, const int64_t* s, int64_t n) {
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
  for_each_compute<3>(
      {&out, &a, &b}, {sizeof(Out), sizeof(In), sizeof(In)}, [&](char** p, const int64_t* s, int64_t n) {
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
  for_each_compute<4>(
      {&out, &a, &b, &c}, {sizeof(Out), sizeof(A), sizeof(B), sizeof(C)}, [&](char** p, const int64_t* s, int64_t n) {
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
