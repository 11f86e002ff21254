// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// conversions from its 32-bit words to uniform and normal numbers. Host+device, so both backends
// draw identical numbers for the same (seed, counter).
#pragma once

#include <cmath>
#include <cstdint>

#include "math/host_device.h"
#include "math/unfused.h"

namespace tapegrad::math {

struct Philox4 {
  uint32_t x[4];
};

TG_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Four 32-bit random words for a 64-bit counter under a 64-bit key.
TG_HD Philox4 philox4x32_10(uint64_t counter, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform on [0, 1) with 24 bits (f32) or 53 bits (f64).
TG_HD float uniform_float(uint32_t word) {
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}
TG_HD double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// One standard normal from one counter (Box-Muller in double, so f32 and f64 agree to rounding).
TG_HD double normal_from(const Philox4& r) {
  double u1 = uniform_double(r.x[0], r.x[1]);
  double u2 = uniform_double(r.x[2], r.x[3]);
  double radius = sqrt(-2.0 * log(1.0 - u1));  // 1 - u1 is in (0, 1]: no log(0)
  return radius * cos(6.283185307179586 * u2);
}

// The transforms from one counter's words to an element's value, shared by the CPU and CUDA
// kernels: element i of a draw uses philox4x32_10(offset + i, seed).

// Uniform on [low, high). Rounding low + (high - low) * u can reach `high`; the interval stays
// half-open by stepping one representable value down.
TG_HD float uniform_f32(const Philox4& r, double low, double high) {
  float v = static_cast<float>(mul_add_unfused(high - low, uniform_float(r.x[0]), low));
  float top = static_cast<float>(high);
  return v < top ? v : nextafterf(top, static_cast<float>(low));
}
TG_HD double uniform_f64(const Philox4& r, double low, double high) {
  double v = mul_add_unfused(high - low, uniform_double(r.x[0], r.x[1]), low);
  return v < high ? v : nextafter(high, low);
}

// Normal with the given mean and standard deviation, in double (convert to the output type after).
TG_HD double normal_value(const Philox4& r, double mean, double std) {
  return mul_add_unfused(std, normal_from(r), mean);
}

// Integer on [low, low + range) from 64 bits; the modulo bias is below range / 2^64.
TG_HD int64_t randint_value(const Philox4& r, int64_t low, uint64_t range) {
  uint64_t bits = (static_cast<uint64_t>(r.x[0]) << 32) | r.x[1];
  return low + static_cast<int64_t>(bits % range);
}

}  // namespace tapegrad::math
