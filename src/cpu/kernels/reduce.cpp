// Reductions on the CPU over a contiguous tensor viewed as [outer, reduced, inner]. Sums of floats
// accumulate in f64 in a fixed order, so results do not depend on the thread count.
#include "math/reduce.h"

#include <limits>
#include <vector>

#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/parallel.h"
#include "cpu/register.h"

namespace tapegrad::cpu {

namespace {

template <class T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// Max/Min keep the first extreme; a NaN wins and stays (math/reduce.h, shared with the CUDA kernels).
template <class T>
bool better(ReduceOp op, T candidate, T best) {
  return math::extreme_replaces(op == ReduceOp::Max, candidate, best);
}

// Sum of one strided run of `count` values, in blocks combined in order (thread-count independent).
template <class T>
Accumulator<T> sum_run(const T* x, int64_t count, int64_t stride) {
  Accumulator<T> acc = 0;
  for (int64_t r = 0; r < count; ++r) acc += static_cast<Accumulator<T>>(x[r * stride]);
  return acc;
}

template <class T, class Out>
void reduce_typed(ReduceOp op, const T* x, Out* out, int64_t outer, int64_t reduced, int64_t inner) {
  const bool is_sum = op == ReduceOp::Sum || op == ReduceOp::Mean;
  const double scale = op == ReduceOp::Mean ? 1.0 / static_cast<double>(reduced) : 1.0;
  if (inner == 1 && outer == 1 && is_sum) {
    // One long row: fixed blocks summed in parallel, then combined in block order.
    constexpr int64_t kBlock = 65536;
    int64_t blocks = (reduced + kBlock - 1) / kBlock;
    std::vector<Accumulator<T>> partial(static_cast<size_t>(std::max<int64_t>(blocks, 1)), 0);
    parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) partial[k] = sum_run(x + k * kBlock, std::min(kBlock, reduced - k * kBlock), 1);
    });
    Accumulator<T> total = 0;
    for (auto p : partial) total += p;
    out[0] = static_cast<Out>(static_cast<double>(total) * scale);
    if constexpr (std::is_integral_v<Out>) out[0] = static_cast<Out>(total);
    return;
  }
  if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(reduced, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * reduced;
        if (is_sum) {
          Accumulator<T> acc = sum_run(row, reduced, 1);
          if constexpr (std::is_integral_v<Out>) {
            out[o] = static_cast<Out>(acc);
          } else {
            out[o] = static_cast<Out>(static_cast<double>(acc) * scale);
          }
        } else {
          T best = row[0];
          for (int64_t r = 1; r < reduced; ++r)
            if (better(op, row[r], best)) best = row[r];
          out[o] = static_cast<Out>(best);
        }
      }
    });
    return;
  }
  // Reduce across rows of [reduced, inner] blocks: walk rows, accumulate a strip of columns.
  constexpr int64_t kStrip = 256;
  int64_t strips = (inner + kStrip - 1) / kStrip;
  parallel_for(0, outer * strips, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(reduced * kStrip, 1)),
               [&](int64_t b, int64_t e) {
                 std::vector<Accumulator<T>> acc(kStrip);
                 std::vector<T> best(kStrip);
                 for (int64_t job = b; job < e; ++job) {
                   int64_t o = job / strips, i0 = (job % strips) * kStrip;
                   int64_t width = std::min(kStrip, inner - i0);
                   const T* base = x + o * reduced * inner + i0;
                   if (is_sum) {
                     std::fill(acc.begin(), acc.begin() + width, 0);
                     for (int64_t r = 0; r < reduced; ++r) {
                       const T* row = base + r * inner;
                       for (int64_t i = 0; i < width; ++i) acc[i] += static_cast<Accumulator<T>>(row[i]);
                     }
                     for (int64_t i = 0; i < width; ++i) {
                       if constexpr (std::is_integral_v<Out>) {
                         out[o * inner + i0 + i] = static_cast<Out>(acc[i]);
                       } else {
                         out[o * inner + i0 + i] = static_cast<Out>(static_cast<double>(acc[i]) * scale);
                       }
                     }
                   } else {
                     std::copy(base, base + width, best.begin());
                     for (int64_t r = 1; r < reduced; ++r) {
                       const T* row = base + r * inner;
                       for (int64_t i = 0; i < width; ++i)
                         if (better(op, row[i], best[i])) best[i] = row[i];
                     }
                     for (int64_t i = 0; i < width; ++i) out[o * inner + i0 + i] = static_cast<Out>(best[i]);
                   }
                 }
               });
}

// Overwrites out. Sums of integers are written as int64 (out's dtype decides).
void reduce(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner) {
  TG_ASSERT(x.is_contiguous() && out.is_contiguous());
  if (x.dtype() == kBool) {
    TG_ASSERT(out.dtype() == kInt64);
    // Count the true values through the int path: bool is one byte of 0/1.
    const bool* data = static_cast<const bool*>(x.data_ptr());
    int64_t* o = static_cast<int64_t*>(out.data_ptr());
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t count = 0;
        for (int64_t r = 0; r < reduced; ++r) count += data[(a * reduced + r) * inner + i];
        o[a * inner + i] = count;
      }
    return;
  }
  dispatch_numeric(x.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (out.dtype() == x.dtype()) {
      reduce_typed<T, T>(op, static_cast<const T*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), outer, reduced,
                         inner);
    } else {
      TG_ASSERT(out.dtype() == kInt64);
      reduce_typed<T, int64_t>(op, static_cast<const T*>(x.data_ptr()), static_cast<int64_t*>(out.data_ptr()), outer,
                               reduced, inner);
    }
  });
}

// Overwrites values and indices.
void reduce_with_index(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices, int64_t outer,
                       int64_t reduced, int64_t inner) {
  TG_ASSERT(x.is_contiguous() && values.is_contiguous() && indices.is_contiguous());
  dispatch_numeric(x.dtype(), "max/min", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = static_cast<const T*>(x.data_ptr());
    T* v = static_cast<T*>(values.data_ptr());
    int64_t* idx = static_cast<int64_t*>(indices.data_ptr());
    parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(reduced, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t job = b; job < e; ++job) {
                     int64_t o = job / inner, i = job % inner;
                     const T* p = data + o * reduced * inner + i;
                     T best = p[0];
                     int64_t where = 0;
                     for (int64_t r = 1; r < reduced; ++r)
                       if (better(op, p[r * inner], best)) {
                         best = p[r * inner];
                         where = r;
                       }
                     v[job] = best;
                     idx[job] = where;
                   }
                 });
  });
}

}  // namespace

void register_reduce(backend::KernelTable& t) {
  t.reduce = reduce;
  t.reduce_with_index = reduce_with_index;
}

}  // namespace tapegrad::cpu
