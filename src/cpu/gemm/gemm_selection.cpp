// Which kernel runs float32 products (see Note [why our own sgemm] in sgemm_avx512.cpp): decided
// once from TAPEGRAD_CPU_GEMM and the CPU, changeable with set_cpu_gemm.
#include <strings.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "cpu/gemm/sgemm_avx512.h"
#include "tapegrad/core/error.h"
#include "tapegrad/runtime.h"

extern "C" char* openblas_get_corename();

namespace tapegrad {

namespace {

// Whether OpenBLAS picked one of its AVX-512 kernel families for this CPU.
bool openblas_uses_avx512() {
  const char* core = openblas_get_corename();
  if (core == nullptr) return false;
  for (const char* family : {"skylakex", "cooperlake", "sapphirerapids"})
    if (strcasecmp(core, family) == 0) return true;
  return false;
}

bool resolve(CpuGemm choice) {
  switch (choice) {
    case CpuGemm::OpenBlas:
      return false;
    case CpuGemm::Avx512:
      TG_CHECK(cpu::sgemm_avx512_available(), "set_cpu_gemm: this CPU (or build) has no AVX-512 for tapegrad's sgemm");
      return true;
    case CpuGemm::Auto:
      break;
  }
  return cpu::sgemm_avx512_available() && !openblas_uses_avx512();
}

CpuGemm choice_from_environment() {
  const char* value = std::getenv("TAPEGRAD_CPU_GEMM");
  if (value == nullptr || *value == '\0' || strcasecmp(value, "auto") == 0) return CpuGemm::Auto;
  if (strcasecmp(value, "openblas") == 0) return CpuGemm::OpenBlas;
  if (strcasecmp(value, "avx512") == 0) return CpuGemm::Avx512;
  TG_CHECK(false, "TAPEGRAD_CPU_GEMM must be auto, openblas or avx512, got '", value, "'");
  return CpuGemm::Auto;  // not reached
}

std::atomic<bool>& use_avx512() {
  static std::atomic<bool> flag{resolve(choice_from_environment())};
  return flag;
}

}  // namespace

void set_cpu_gemm(CpuGemm choice) {
  use_avx512().store(resolve(choice));
}

const char* cpu_gemm_name() {
  return use_avx512().load() ? "avx512" : "openblas";
}

namespace cpu {
bool use_sgemm_avx512() {
  return use_avx512().load(std::memory_order_relaxed);
}
}  // namespace cpu

}  // namespace tapegrad
