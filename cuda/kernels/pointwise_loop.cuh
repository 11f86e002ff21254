// The loop under every CUDA pointwise kernel: out[i] = f(in_0[i], ..., in_k[i]) for operands of one
// shape (inputs already broadcast to out's shape, stride 0 where expanded). Two paths:
// - all operands contiguous and their pointers aligned: a grid-stride loop over 16-byte vectors
//   (V elements per step, V = 16 / the widest element), then a scalar tail of fewer than V elements;
// - anything else: a grid-stride loop over elements, each operand mapping the linear index to its
//   own offset through a StridedIndex (strided_index.h).
// `out` may alias an input element for element (in-place ops): every thread reads its inputs before
// it writes, and no two threads touch the same element.
// Shared by the pointwise families (copy, fill, random, unary, binary, select).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/strided_index.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::cuda_backend {

// Pointwise kernels are memory-bound: about two waves of full blocks fill an H100/H200; past that a
// bigger grid only adds block scheduling, so the grid-stride loop takes over.
constexpr int kPointwiseMaxBlocks = 2048;

inline int pointwise_grid(int64_t n) {
  return std::min(grid_for(n), kPointwiseMaxBlocks);
}

// V elements of T moved as one aligned load or store (16 bytes at most).
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// One operand of the strided path.
template <class T>
struct StridedPtr {
  T* data;
  StridedIndex index;

  __device__ __forceinline__ T& operator[](int64_t linear) const { return data[index.offset(linear)]; }
};

template <int V, class Out, class F, class... VecIn>
__device__ __forceinline__ Vec<Out, V> apply_vec(const F& f, VecIn... x) {  // by value: one wide load each
  Vec<Out, V> r;
#pragma unroll
  for (int j = 0; j < V; ++j) r.v[j] = f(x.v[j]...);
  return r;
}

template <int V, class F, class Out, class... In>
__global__ void pointwise_contiguous_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t vectors = n / V;
  // The loads happen as apply_vec's arguments, before the store: in-place stays correct.
  TG_GRID_STRIDE_LOOP(i, vectors) {
    reinterpret_cast<Vec<Out, V>*>(out)[i] = apply_vec<V, Out>(f, reinterpret_cast<const Vec<In, V>*>(in)[i]...);
  }
  // The tail (fewer than V elements) goes to the first threads of the grid.
  const int64_t t = vectors * V + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t < n) out[t] = f(in[t]...);
}

template <class F, class Out, class... In>
__global__ void pointwise_strided_kernel(int64_t n, F f, StridedPtr<Out> out, StridedPtr<const In>... in) {
  TG_GRID_STRIDE_LOOP(i, n) {
    out[i] = f(in[i]...);
  }
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <class T>
StridedPtr<T> strided_ptr(const Tensor& t) {
  return StridedPtr<T>{static_cast<T*>(t.data_ptr()), make_strided_index(t)};
}

// Runs f over every element of `out` on current_stream(). Out and In... are the element types (the
// CUDA ones: __half, __nv_bfloat16) of out and of each input tensor, in order; f is a device functor
// Out(In...). Launches nothing for an empty out.
template <class Out, class... In, class F, class... Tensors>
void launch_pointwise(const char* op, const F& f, const Tensor& out, const Tensors&... in) {
  static_assert(sizeof...(In) == sizeof...(Tensors), "one element type per input tensor");
  const int64_t n = out.numel();
  if (n == 0) return;
  TG_ASSERT(((in.sizes() == out.sizes()) && ...), op, ": pointwise operands must share out's shape ",
            shape_str(out.sizes()));
  cuda::DeviceGuard guard(out.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();

  constexpr size_t kWidest = std::max({sizeof(Out), sizeof(In)...});
  constexpr int V = static_cast<int>(16 / kWidest);
  const bool contiguous = out.is_contiguous() && (in.is_contiguous() && ...);
  const bool aligned =
      aligned_to(out.data_ptr(), V * sizeof(Out)) && (aligned_to(in.data_ptr(), V * sizeof(In)) && ...);
  if (contiguous && aligned) {
    TG_LAUNCH_KERNEL(pointwise_grid(std::max<int64_t>(n / V, 1)), kBlockThreads, 0, stream,
                     pointwise_contiguous_kernel<V>)
    (n, f, static_cast<Out*>(out.data_ptr()), static_cast<const In*>(in.data_ptr())...);
  } else {
    TG_LAUNCH_KERNEL(pointwise_grid(n), kBlockThreads, 0, stream, pointwise_strided_kernel)
    (n, f, strided_ptr<Out>(out), strided_ptr<const In>(in)...);
  }
  TG_CUDA_CHECK_LAUNCH(op);
}

}  // namespace tapegrad::cuda_backend
