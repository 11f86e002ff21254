// Note [activations in AVX-512 registers] (src/cpu/loops/vec_math_avx512.h), checked for every
// float: vec512::exp, sigmoid and tanh against the AVX-512 clones of loops of vec::exp, sigmoid and
// tanh (what the kernels ran before), all 2^32 bit patterns. Prints how many differ (none). About
// 3.5 minutes on one core with AVX-512:
//
//   g++ -O2 -fno-trapping-math -Isrc tools/checks/vec_math_avx512_exhaustive.cpp -o /tmp/check && /tmp/check
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cpu/loops/vec_math.h"
#include "cpu/loops/vec_math_avx512.h"

namespace vec = tapegrad::cpu::vec;
namespace vec512 = tapegrad::cpu::vec512;

TG_VECTOR_CLONES void exp_loop(const float* __restrict x, float* __restrict y, long n) {
  for (long j = 0; j < n; ++j) y[j] = vec::exp(x[j]);
}
TG_VECTOR_CLONES void sigmoid_loop(const float* __restrict x, float* __restrict y, long n) {
  for (long j = 0; j < n; ++j) y[j] = vec::sigmoid(x[j]);
}
TG_VECTOR_CLONES void tanh_loop(const float* __restrict x, float* __restrict y, long n) {
  for (long j = 0; j < n; ++j) y[j] = vec::tanh(x[j]);
}

__attribute__((target("avx512f"))) void in_registers(int which, const float* x, float* y, long n) {
  for (long j = 0; j < n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    _mm512_storeu_ps(y + j, which == 0 ? vec512::exp(v) : which == 1 ? vec512::sigmoid(v) : vec512::tanh(v));
  }
}

int main() {
  if (!vec512::available()) {
    std::printf("this CPU has no AVX-512\n");
    return 1;
  }
  const long block = 1 << 20;
  std::vector<float> x(block), want(block), got(block);
  void (*const loops[3])(const float*, float*, long) = {exp_loop, sigmoid_loop, tanh_loop};
  const char* names[3] = {"exp", "sigmoid", "tanh"};
  long long differ[3] = {0, 0, 0};
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += block) {
    for (long j = 0; j < block; ++j) {
      const auto u = static_cast<uint32_t>(base + static_cast<uint64_t>(j));
      std::memcpy(&x[j], &u, sizeof u);
    }
    for (int which = 0; which < 3; ++which) {
      loops[which](x.data(), want.data(), block);
      in_registers(which, x.data(), got.data(), block);
      for (long j = 0; j < block; ++j) differ[which] += std::memcmp(&want[j], &got[j], sizeof(float)) != 0;
    }
  }
  for (int which = 0; which < 3; ++which) std::printf("%s: %lld of 2^32 floats differ\n", names[which], differ[which]);
  return differ[0] + differ[1] + differ[2] == 0 ? 0 : 1;
}
