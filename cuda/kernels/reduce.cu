// Sum, mean, max and min over the middle dim of a contiguous [outer, reduced, inner] tensor, and
// max/min with the first index. One pair of kernels serves every op through a small policy
// (identity, load, combine, write); the layout picks the kernel:
//   inner == 1  rows of `reduced` contiguous values: a warp per short row, a block per long one;
//   inner > 1   threads along the outputs (coalesced loads), threadIdx.y splitting `reduced`;
// and when outputs are too few to fill the device, gridDim.y splits `reduced` into slices whose
// partials a second kernel combines in a fixed order (deterministic: no atomics).
// Float sums accumulate in f64 and integer sums in int64, like the CPU backend.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/kernel_tensors.h"
#include "kernels/block_reduce.cuh"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "math/reduce.h"
#include "register.h"
#include "runtime/cuda_check.h"

namespace tapegrad::cuda_backend {

using backend::ReduceOp;

namespace {

// A partial max/min: the value and its index along `reduced`; index < 0 means no element yet.
template <class V>
struct ValueIndex {
  V value;
  int64_t index;
};

template <class V>
__device__ __forceinline__ ValueIndex<V> shfl_xor(ValueIndex<V> p, int lane_mask) {
  return {cuda_backend::shfl_xor(p.value, lane_mask), cuda_backend::shfl_xor(p.index, lane_mask)};
}

// Sum and mean: out = sum * scale (scale = 1 / reduced for mean). Integer outputs take the sum as is.
template <class T, class Out>
struct SumPolicy {
  using Partial = std::conditional_t<std::is_floating_point_v<Acc<T>>, double, int64_t>;
  Out* out;
  double scale;

  __device__ Partial identity() const { return Partial(0); }
  __device__ Partial load(T value, int64_t) const { return convert<Partial>(value); }
  __device__ Partial combine(Partial a, Partial b) const { return a + b; }
  __device__ void write(int64_t at, Partial sum) const {
    if constexpr (std::is_integral_v<Out>) {
      out[at] = static_cast<Out>(sum);
    } else {
      out[at] = convert<Out>(static_cast<double>(sum) * scale);
    }
  }
};

// Max and min with the first index of the extreme (NaN propagating); `indices` may be null.
template <class T>
struct ExtremePolicy {
  using V = Acc<T>;
  using Partial = ValueIndex<V>;
  bool is_max;
  T* values;
  int64_t* indices;

  __device__ Partial identity() const { return {V(0), -1}; }
  __device__ Partial load(T value, int64_t at) const { return {convert<V>(value), at}; }
  // Commutative (ties go to the lower index), as warp_all_reduce needs.
  __device__ Partial combine(Partial a, Partial b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    return math::extreme_with_index_replaces(is_max, b.value, b.index, a.value, a.index) ? b : a;
  }
  __device__ void write(int64_t at, Partial best) const {
    values[at] = convert<T>(best.value);
    if (indices != nullptr) indices[at] = best.index;
  }
};

// The part [begin, end) of `reduced` that slice blockIdx.y covers.
__device__ __forceinline__ int64_t slice_begin(int64_t slice_len) {
  return blockIdx.y * slice_len;
}
__device__ __forceinline__ int64_t slice_end(int64_t slice_len, int64_t reduced) {
  return min(reduced, (blockIdx.y + 1) * slice_len);
}

// inner == 1: x is [rows, reduced]. With one slice each row's result is written; otherwise slice s
// of row r leaves its partial at partials[r * slices + s].
template <int kThreadsPerRow, class Policy, class T>
__global__ void reduce_rows_kernel(Policy policy, const T* x, int64_t rows, int64_t reduced, int64_t slice_len,
                                   typename Policy::Partial* partials) {
  using Tiling = RowTiling<kThreadsPerRow>;
  using Partial = typename Policy::Partial;
  TG_SHARED_ARRAY(Partial, shared, Tiling::kSharedSlots);
  auto combine = [&](Partial a, Partial b) { return policy.combine(a, b); };
  const int64_t begin = slice_begin(slice_len), end = slice_end(slice_len, reduced);
  for (int64_t row = Tiling::first_row(); row < rows; row += Tiling::row_step()) {
    const T* in = x + row * reduced;
    Partial acc = policy.identity();
    for (int64_t r = begin + Tiling::lane(); r < end; r += kThreadsPerRow) acc = combine(acc, policy.load(in[r], r));
    acc = Tiling::all_reduce(acc, combine, shared);
    if (Tiling::lane() == 0) {
      if (partials == nullptr) {
        policy.write(row, acc);
      } else {
        partials[row * gridDim.y + blockIdx.y] = acc;
      }
    }
  }
}

// inner > 1: output c = (o, i) reduces x[o, :, i]. threadIdx.x walks consecutive outputs, which
// sit next to each other in memory; the blockDim.y (a power of two) threads of an output take
// interleaved r and meet in shared memory. With several slices the partial of slice s for output c
// goes to partials[s * outputs + c].
template <class Policy, class T>
__global__ void reduce_columns_kernel(Policy policy, const T* x, int64_t outer, int64_t reduced, int64_t inner,
                                      int64_t slice_len, typename Policy::Partial* partials) {
  using Partial = typename Policy::Partial;
  TG_SHARED_ARRAY(Partial, shared, kBlockThreads);
  const int64_t outputs = outer * inner;
  const int64_t begin = slice_begin(slice_len), end = slice_end(slice_len, reduced);
  const int tx = threadIdx.x, ty = threadIdx.y, width = blockDim.x, lanes = blockDim.y;
  // The loop bound depends on blockIdx only, so the barriers below are reached by the whole block.
  for (int64_t first = blockIdx.x * static_cast<int64_t>(width); first < outputs;
       first += static_cast<int64_t>(gridDim.x) * width) {
    const int64_t c = first + tx;
    Partial acc = policy.identity();
    if (c < outputs) {
      const int64_t o = c / inner, i = c - o * inner;
      const T* in = x + o * reduced * inner + i;
      for (int64_t r = begin + ty; r < end; r += lanes) acc = policy.combine(acc, policy.load(in[r * inner], r));
    }
    if (lanes > 1) {
      shared[ty * width + tx] = acc;
      __syncthreads();
      for (int half = lanes / 2; half > 0; half /= 2) {
        if (ty < half)
          shared[ty * width + tx] = policy.combine(shared[ty * width + tx], shared[(ty + half) * width + tx]);
        __syncthreads();
      }
      acc = shared[tx];
      __syncthreads();  // the next round's stores wait until row 0 has read its result
    }
    if (ty == 0 && c < outputs) {
      if (partials == nullptr) {
        policy.write(c, acc);
      } else {
        partials[blockIdx.y * outputs + c] = acc;
      }
    }
  }
}

// Second pass: a warp per output combines its `slices` partials (at c * output_stride +
// s * slice_stride) in a fixed order and writes the result.
template <class Policy>
__global__ void reduce_slices_kernel(Policy policy, const typename Policy::Partial* partials, int64_t outputs,
                                     int64_t slices, int64_t output_stride, int64_t slice_stride) {
  using Tiling = RowTiling<kWarpSize>;
  using Partial = typename Policy::Partial;
  auto combine = [&](Partial a, Partial b) { return policy.combine(a, b); };
  for (int64_t c = Tiling::first_row(); c < outputs; c += Tiling::row_step()) {
    Partial acc = policy.identity();
    for (int64_t s = Tiling::lane(); s < slices; s += kWarpSize)
      acc = combine(acc, partials[c * output_stride + s * slice_stride]);
    acc = warp_all_reduce(acc, combine);
    if (Tiling::lane() == 0) policy.write(c, acc);
  }
}

// Enough resident blocks to keep every multiprocessor busy.
int64_t target_blocks() {
  int device = 0, multiprocessors = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device), "reduce");
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device), "reduce");
  return 4 * static_cast<int64_t>(std::max(multiprocessors, 1));
}

// Each thread of a slice should still have this many elements to combine, or slicing costs more
// than it gains.
constexpr int64_t kMinPerThread = 16;
constexpr int64_t kMaxSlices = 65535;  // gridDim.y

// How many slices split `reduced` when `blocks` blocks of `lanes` threads per output cover the outputs.
int64_t slices_for(int64_t blocks, int64_t lanes, int64_t reduced) {
  const int64_t wanted = target_blocks();
  if (blocks >= wanted) return 1;
  int64_t by_device = (wanted + blocks - 1) / blocks;
  int64_t by_work = reduced / (lanes * kMinPerThread);
  return std::max<int64_t>(1, std::min({by_device, by_work, kMaxSlices}));
}

// Scratch for `count` partials on the device of `like`; freed (stream-ordered) when it goes out of scope.
template <class Partial>
Tensor partial_buffer(int64_t count, const Tensor& like) {
  const int64_t words = (count * static_cast<int64_t>(sizeof(Partial)) + 7) / 8;
  return backend::allocate_tensor({words}, kInt64, like.device(), "reduce");
}

template <class Policy, class T>
void launch_reduce(const Policy& policy, const Tensor& x, int64_t outer, int64_t reduced, int64_t inner,
                   const char* op) {
  using Partial = typename Policy::Partial;
  const T* data = static_cast<const T*>(x.data_ptr());
  const int64_t outputs = outer * inner;
  if (outputs == 0) return;
  cuda::DeviceGuard guard(x.device());  // kernels launch on the current device
  cudaStream_t stream = current_stream();

  if (inner == 1 && reduced <= kWarpRowLimit) {
    using Tiling = RowTiling<kWarpSize>;
    TG_LAUNCH_KERNEL(Tiling::grid(outer), Tiling::block(), 0, stream, reduce_rows_kernel<kWarpSize, Policy, T>)
    (policy, data, outer, reduced, reduced, nullptr);
    TG_CUDA_CHECK_LAUNCH(op);
    return;
  }

  int64_t slices = 1, slice_len = reduced;
  Tensor scratch;
  Partial* partials = nullptr;
  auto plan_slices = [&](int64_t blocks, int64_t lanes) {
    slices = slices_for(blocks, lanes, reduced);
    if (slices == 1) return;
    slice_len = (reduced + slices - 1) / slices;
    slices = (reduced + slice_len - 1) / slice_len;  // no empty slice at the end
    scratch = partial_buffer<Partial>(outputs * slices, x);
    partials = reinterpret_cast<Partial*>(scratch.data_ptr());
  };

  if (inner == 1) {
    using Tiling = RowTiling<kBlockThreads>;
    plan_slices(outer, kBlockThreads);
    dim3 grid(Tiling::grid(outer), static_cast<unsigned>(slices));
    TG_LAUNCH_KERNEL(grid, Tiling::block(), 0, stream, reduce_rows_kernel<kBlockThreads, Policy, T>)
    (policy, data, outer, reduced, slice_len, partials);
    TG_CUDA_CHECK_LAUNCH(op);
  } else {
    // Many outputs (or a short reduced dim): one thread each, r in order. Few: a block covers at
    // most 32 of them and its other threads share their reduced dim.
    const bool many_outputs = outputs * 4 >= target_blocks() * kBlockThreads || reduced < 64;
    int width = kBlockThreads;
    if (!many_outputs) {
      width = 1;
      while (width < kWarpSize && width < outputs) width *= 2;
    }
    const int lanes = kBlockThreads / width;
    const int64_t blocks = (outputs + width - 1) / width;
    plan_slices(blocks, lanes);
    dim3 grid(grid_for(outputs, width), static_cast<unsigned>(slices));
    TG_LAUNCH_KERNEL(grid, dim3(width, lanes), 0, stream, reduce_columns_kernel<Policy, T>)
    (policy, data, outer, reduced, inner, slice_len, partials);
    TG_CUDA_CHECK_LAUNCH(op);
  }

  if (slices > 1) {
    using Tiling = RowTiling<kWarpSize>;
    const int64_t output_stride = inner == 1 ? slices : 1;
    const int64_t slice_stride = inner == 1 ? 1 : outputs;
    TG_LAUNCH_KERNEL(Tiling::grid(outputs), Tiling::block(), 0, stream, reduce_slices_kernel<Policy>)
    (policy, partials, outputs, slices, output_stride, slice_stride);
    TG_CUDA_CHECK_LAUNCH(op);
  }
}

// Overwrites out. Sums of integers and bools are written as int64 (out's dtype decides).
void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner) {
  TG_ASSERT(x.is_contiguous() && out.is_contiguous());
  const bool is_sum = op == ReduceOp::Sum || op == ReduceOp::Mean;
  TG_CHECK(is_sum || reduced > 0, "max/min: cannot reduce over a dim of size 0");
  const double scale = op == ReduceOp::Mean ? 1.0 / static_cast<double>(reduced) : 1.0;
  if (x.dtype() == kBool) {
    TG_CHECK(is_sum, "max/min: not defined for bool tensors");
    TG_ASSERT(out.dtype() == kInt64);
    SumPolicy<bool, int64_t> policy{static_cast<int64_t*>(out.data_ptr()), scale};
    launch_reduce<SumPolicy<bool, int64_t>, bool>(policy, x, outer, reduced, inner, "sum");
    return;
  }
  dispatch_numeric(x.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (!is_sum) {
      TG_ASSERT(out.dtype() == x.dtype());
      ExtremePolicy<T> policy{op == ReduceOp::Max, static_cast<T*>(out.data_ptr()), nullptr};
      launch_reduce<ExtremePolicy<T>, T>(policy, x, outer, reduced, inner, op == ReduceOp::Max ? "max" : "min");
    } else if (out.dtype() == x.dtype()) {
      SumPolicy<T, T> policy{static_cast<T*>(out.data_ptr()), scale};
      launch_reduce<SumPolicy<T, T>, T>(policy, x, outer, reduced, inner, "sum");
    } else if constexpr (std::is_integral_v<T>) {
      TG_ASSERT(out.dtype() == kInt64);
      SumPolicy<T, int64_t> policy{static_cast<int64_t*>(out.data_ptr()), scale};
      launch_reduce<SumPolicy<T, int64_t>, T>(policy, x, outer, reduced, inner, "sum");
    } else {
      TG_ASSERT(false, "reduce: a floating-point sum is written in its own dtype, got ", out.dtype());
    }
  });
}

// Overwrites values and indices (the first position of the extreme along `reduced`).
void reduce_with_index(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer,
                       int64_t reduced, int64_t inner) {
  TG_ASSERT(x.is_contiguous() && values.is_contiguous() && indices.is_contiguous());
  TG_ASSERT(op == ReduceOp::Max || op == ReduceOp::Min);
  TG_ASSERT(indices.dtype() == kInt64 && values.dtype() == x.dtype());
  TG_CHECK(reduced > 0, "max/min: cannot reduce over a dim of size 0");
  dispatch_numeric(x.dtype(), "max/min", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ExtremePolicy<T> policy{op == ReduceOp::Max, static_cast<T*>(values.data_ptr()),
                            static_cast<int64_t*>(indices.data_ptr())};
    launch_reduce<ExtremePolicy<T>, T>(policy, x, outer, reduced, inner, op == ReduceOp::Max ? "max" : "min");
  });
}

}  // namespace

void register_reduce(backend::KernelTable& table) {
  table.reduce = reduce;
  table.reduce_with_index = reduce_with_index;
}

}  // namespace tapegrad::cuda_backend
