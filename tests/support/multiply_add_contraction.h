// Whether this build's compiler fuses a * b + c into one multiply-add where the CPU has FMA. GCC
// does from -O2 (its pass that forms them runs with the expensive optimisations); the sanitizer
// builds, at -O1, do not. So a loop of vec_math.h's scalar functions gives other bits there than in
// the release build, and tests that compare the AVX-512 intrinsic forms (Note [activations in AVX-512
// registers]) with the compiler's code hold only where this is true.
#pragma once

namespace tapegrad::testing {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

__attribute__((target("fma"), noinline)) inline float multiply_then_add(float a, float b, float c) {
  return a * b + c;
}

// (1 + 2^-23)^2 - (1 + 2^-22) is 2^-46 fused, 0 with the product rounded first.
inline bool build_contracts_multiply_adds() {
  if (!__builtin_cpu_supports("fma")) return false;
  volatile float a = 1.0f + 0x1p-23f, c = -(1.0f + 0x1p-22f);
  return multiply_then_add(a, a, c) != 0.0f;
}
#else
inline bool build_contracts_multiply_adds() {
  return false;
}
#endif

}  // namespace tapegrad::testing
