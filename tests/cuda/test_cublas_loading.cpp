// Note [cuBLAS on first use] (cuda/blas/cublas_loader.h): a process that multiplies nothing on a GPU never
// opens cuBLAS, and the first use resolves every entry point the backend calls. CUDA builds only;
// no GPU needed.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "blas/cublas_loader.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

// Whether a library whose file name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CublasLoading, NotOpenedByAProcessWithoutGpuProducts) {
  // CPU work with matrix products and autograd, and the device queries every program makes.
  Tensor a = randn({16, 16}).requires_grad_(true);
  sum(matmul(a, a)).backward();
  (void)cuda::device_count();
  (void)cuda::is_available();
  EXPECT_FALSE(cuda_backend::cublas_loaded());
  EXPECT_FALSE(mapped("libcublas"));
}

TEST(CublasLoading, FirstUseResolvesEveryEntryPoint) {
  const cuda_backend::CublasApi& api = cuda_backend::cublas_api();
#define TG_EXPECT_RESOLVED(member, function) EXPECT_NE(api.member, nullptr) << #function;
  TG_CUBLAS_FUNCTIONS(TG_EXPECT_RESOLVED)
  TG_CUBLASLT_FUNCTIONS(TG_EXPECT_RESOLVED)
#undef TG_EXPECT_RESOLVED
  EXPECT_TRUE(cuda_backend::cublas_loaded());
  EXPECT_EQ(&cuda_backend::cublas_api(), &api) << "loaded once";
#ifndef TAPEGRAD_CUDA_EMULATED
  // The control for the first case: a loaded cuBLAS shows in the maps it reads.
  EXPECT_TRUE(mapped("libcublasLt.so"));
  EXPECT_TRUE(mapped("libcublas.so"));
#endif
}

}  // namespace
}  // namespace tapegrad
