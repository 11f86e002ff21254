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

// Note [choosing the float kernel by size]: where OpenBLAS has its AVX-512 kernels (Intel's
// Skylake-X to Sapphire Rapids families) it wins on large products, but tapegrad's kernel, which
// reads row-major A in place and skips OpenBLAS's separate pass that scales C by beta, wins on the
// small and medium ones a training step at a small batch is made of. Measured on a 2-core Xeon with
// AMX and Debian's OpenBLAS 0.3.21 (SKYLAKEX kernels), 2 threads, ours / OpenBLAS: 64 x 1000 x 512
// (mlp_seed:64's first layer) 0.77, 64 x 160 x 512 (an LSTM step) 0.69, 256 x 1000 x 512 0.97,
// 1024 x 1000 x 512 1.06, 2048^3 1.20; whole training steps 5-22% faster below the line, 3-6%
// slower above it with ours everywhere. So Auto sends products under kSmallProductMacs
// multiply-adds to ours there, and the rest to OpenBLAS.
constexpr int64_t kSmallProductMacs = int64_t{1} << 26;

enum Mode : int { kOpenBlasAlways, kAvx512Always, kAvx512WhenSmall };

Mode resolve(CpuGemm choice) {
  switch (choice) {
    case CpuGemm::OpenBlas:
      return kOpenBlasAlways;
    case CpuGemm::Avx512:
      TG_CHECK(cpu::sgemm_avx512_available(), "set_cpu_gemm: this CPU (or build) has no AVX-512 for tapegrad's sgemm");
      return kAvx512Always;
    case CpuGemm::Auto:
      break;
  }
  if (!cpu::sgemm_avx512_available()) return kOpenBlasAlways;
  return cpu::openblas_uses_avx512() ? kAvx512WhenSmall : kAvx512Always;
}

CpuGemm choice_from_environment() {
  const char* value = std::getenv("TAPEGRAD_CPU_GEMM");
  if (value == nullptr || *value == '\0' || strcasecmp(value, "auto") == 0) return CpuGemm::Auto;
  if (strcasecmp(value, "openblas") == 0) return CpuGemm::OpenBlas;
  if (strcasecmp(value, "avx512") == 0) return CpuGemm::Avx512;
  TG_CHECK(false, "TAPEGRAD_CPU_GEMM must be auto, openblas or avx512, got '", value, "'");
  return CpuGemm::Auto;  // not reached
}

std::atomic<int>& mode() {
  static std::atomic<int> current{resolve(choice_from_environment())};
  return current;
}

}  // namespace

void set_cpu_gemm(CpuGemm choice) {
  mode().store(resolve(choice));
}

const char* cpu_gemm_name() {
  switch (mode().load()) {
    case kOpenBlasAlways:
      return "openblas";
    case kAvx512Always:
      return "avx512";
    default:
      return "avx512 below 2^26 multiply-adds, openblas above";
  }
}

namespace cpu {
// Whether OpenBLAS picked one of its AVX-512 kernel families for this CPU.
bool openblas_uses_avx512() {
  const char* core = openblas_get_corename();
  if (core == nullptr) return false;
  for (const char* family : {"skylakex", "cooperlake", "sapphirerapids"})
    if (strcasecmp(core, family) == 0) return true;
  return false;
}

bool use_sgemm_avx512(int64_t m, int64_t n, int64_t k) {
  switch (mode().load(std::memory_order_relaxed)) {
    case kOpenBlasAlways:
      return false;
    case kAvx512Always:
      return true;
    default:
      return m * n * k < kSmallProductMacs;
  }
}
}  // namespace cpu

}  // namespace tapegrad
