// Copies with dtype conversion, fills, ranges and Philox random fills on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/half/convert_16bit.h"
#include "cpu/kernels/shared_kernels.h"
#include "cpu/kernels/uniform_avx512.h"
#include "cpu/loops/dtype_dispatch.h"
#include "cpu/loops/strided_loop.h"
#include "cpu/loops/transpose.h"
#include "math/philox.h"
#include "math/unfused.h"

namespace tapegrad::cpu {

namespace {

bool copy_transposed_2d(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.dim() != 2 || dst.dim() != 2 || src.sizes() != dst.sizes()) return false;
  // Below kMinSide the general loop's lines stay in cache anyway; four-byte elements, moved in
  // register blocks, gain from 8 on (an LSTM's W_ih^T with 32 inputs).
  const int64_t kMinSide = dtype_size(dst.dtype()) == 4 ? 8 : 64;
  const int64_t rows = dst.size(0), cols = dst.size(1);
  if (rows < kMinSide || cols < kMinSide || dst.stride(1) != 1 || src.stride(0) != 1 || src.stride(1) < rows ||
      dst.stride(0) < cols)
    return false;
  // Copies bytes: the same dtype on both sides, so any element type of the same size will do.
  return transpose_2d(src.data_ptr(), src.stride(1), dst.data_ptr(), dst.stride(0), rows, cols, dtype_size(dst.dtype()),
                      /*parallel=*/true);
}

}  // namespace

// Overwrites dst.
void copy(const Tensor& src, const Tensor& dst) {
  if (copy_16bit_contiguous(src, dst)) return;  // mixed precision's casts, vectorised
  if (copy_transposed_2d(src, dst)) return;
  dispatch_all(dst.dtype(), "copy", [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    dispatch_all(src.dtype(), "copy", [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      map_unary<D, S>(dst, src, [](S v) { return convert<D>(v); });
    });
  });
}

// Overwrites out.
void fill(const Tensor& out, double value) {
  dispatch_all(out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T>(value);
    for_each_strided<1>({&out}, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    });
  });
}

namespace {

// Overwrites contiguous out with start + i * step.
void arange(const Tensor& out, double start, double step) {
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(math::arange_value(start, step, i));
    });
  });
}

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) {
  dispatch_floating(out.dtype(), "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), 4096, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        if (have_uniform_f32_avx512()) return uniform_f32_avx512(o + b, b, e, low, high, seed, offset);
      }
      for (int64_t i = b; i < e; ++i) {
        math::Philox4 r = math::philox4x32_10(offset + static_cast<uint64_t>(i), seed);
        if constexpr (std::is_same_v<T, float>) {
          o[i] = math::uniform_f32(r, low, high);
        } else {
          o[i] = math::uniform_f64(r, low, high);
        }
      }
    });
  });
}

void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) {
  dispatch_floating(out.dtype(), "normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), 2048, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        o[i] =
            static_cast<T>(math::normal_value(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), mean, std));
    });
  });
}

void randint(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  const uint64_t range = static_cast<uint64_t>(high - low);
  dispatch_numeric(out.dtype(), "randint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        o[i] = static_cast<T>(
            math::randint_value(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), low, range));
      }
    });
  });
}

}  // namespace

void register_copy_fill(backend::KernelTable& t) {
  t.copy = copy;
  t.fill = fill;
  t.arange = arange;
  t.uniform = uniform;
  t.normal = normal;
  t.randint = randint;
}

}  // namespace tapegrad::cpu
