// Process-wide runtime settings.
#pragma once

namespace tapegrad {

// Threads used by the CPU backend (our loops and OpenBLAS share one OpenMP pool); process-wide.
void set_num_threads(int threads);
int get_num_threads();

// Which code runs float32 matrix products on the CPU; float64 ones always use OpenBLAS.
enum class CpuGemm {
  // tapegrad's AVX-512 kernel where the CPU has AVX-512 but OpenBLAS chose a kernel without it (as
  // OpenBLAS releases do on CPUs newer than themselves, e.g. 0.3.21 on Zen 4 and 5); where OpenBLAS
  // runs its own AVX-512 kernels (Intel Xeons), ours for products of under 2^26 multiply-adds, which
  // it wins, and OpenBLAS for larger ones; OpenBLAS on CPUs without AVX-512.
  Auto,
  OpenBlas,
  Avx512,  // tapegrad's AVX-512 kernel; an error where the CPU lacks AVX-512
};
// Process-wide. The environment variable TAPEGRAD_CPU_GEMM=auto|openblas|avx512 sets the initial choice.
void set_cpu_gemm(CpuGemm choice);
// What float32 products use now: "avx512" (tapegrad's kernel), "openblas", or both by size (Auto on a
// CPU whose OpenBLAS has AVX-512 kernels).
const char* cpu_gemm_name();

}  // namespace tapegrad
