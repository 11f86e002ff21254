// Copies with dtype conversion, fills, ranges and Philox random fills on the CPU.
#include <cmath>

#include "cpu/convert_16bit.h"
#include "cpu/cpu_kernels.h"
#include "cpu/dtype_dispatch.h"
#include "cpu/strided_loop.h"
#include "math/philox.h"
#include "math/unfused.h"

namespace tapegrad::cpu {

// Overwrites dst.
void copy(const Tensor& src, const Tensor& dst) {
  if (copy_16bit_contiguous(src, dst)) return;  // mixed precision's casts, vectorised
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
        o[i] = static_cast<T>(math::normal_value(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), mean, std));
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
        o[i] = static_cast<T>(math::randint_value(math::philox4x32_10(offset + static_cast<uint64_t>(i), seed), low, range));
      }
    });
  });
}

}  // namespace tapegrad::cpu
