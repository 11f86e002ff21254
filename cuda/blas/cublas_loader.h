// cuBLAS and cuBLASLt, opened on first use (Note [cuBLAS on first use]). Every call into them goes
// through cublas_api().
// Shared by the blas/ files and tests/cuda/test_cublas_loading.cpp.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace tapegrad::cuda_backend {

// Note [cuBLAS on first use]: a process that links cuBLAS pays for its static initialisers when
// it starts, GPU or not: about half a second of CPU time here, for every program and every test
// case (each a process of its own) that never multiplies a matrix on a GPU. So the backend does not
// link cuBLAS or cuBLASLt; the first call that needs them opens them with dlopen (by soname, so
// LD_LIBRARY_PATH and the library's run path apply, else from the toolkit the build found) and
// resolves the few entry points below. cuDNN, the CUDA runtime and NCCL load lazily already or cost
// nothing at start, and stay linked. The emulation build fills the table from the emulator.
//
// X(member, function): the function as the code calls it (cublas_v2.h maps some names to their
// _v2 symbols; the table resolves what the name expands to).
#define TG_CUBLAS_FUNCTIONS(X)                           \
  X(create, cublasCreate)                                \
  X(set_stream, cublasSetStream)                         \
  X(set_workspace, cublasSetWorkspace)                   \
  X(get_status_string, cublasGetStatusString)            \
  X(dgemm, cublasDgemm_64)                               \
  X(dgemm_strided_batched, cublasDgemmStridedBatched_64) \
  X(gemm_ex, cublasGemmEx_64)                            \
  X(gemm_strided_batched_ex, cublasGemmStridedBatchedEx_64)
#define TG_CUBLASLT_FUNCTIONS(X)                                              \
  X(lt_create, cublasLtCreate)                                                \
  X(lt_matmul, cublasLtMatmul)                                                \
  X(lt_matmul_desc_create, cublasLtMatmulDescCreate)                          \
  X(lt_matmul_desc_destroy, cublasLtMatmulDescDestroy)                        \
  X(lt_matmul_desc_set_attribute, cublasLtMatmulDescSetAttribute)             \
  X(lt_matrix_layout_create, cublasLtMatrixLayoutCreate)                      \
  X(lt_matrix_layout_destroy, cublasLtMatrixLayoutDestroy)                    \
  X(lt_matmul_preference_create, cublasLtMatmulPreferenceCreate)              \
  X(lt_matmul_preference_destroy, cublasLtMatmulPreferenceDestroy)            \
  X(lt_matmul_preference_set_attribute, cublasLtMatmulPreferenceSetAttribute) \
  X(lt_matmul_algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic)

struct CublasApi {
#define TG_CUBLAS_MEMBER(member, function) decltype(&function) member = nullptr;
  TG_CUBLAS_FUNCTIONS(TG_CUBLAS_MEMBER)
  TG_CUBLASLT_FUNCTIONS(TG_CUBLAS_MEMBER)
#undef TG_CUBLAS_MEMBER
};

// The table, loaded by the first call (thread-safe); an Error naming the library and the loader's
// reason when it cannot be opened or lacks an entry point.
const CublasApi& cublas_api();

// Whether this process has opened cuBLAS yet (for tests: a process that never multiplies on a GPU
// must not have).
bool cublas_loaded();

}  // namespace tapegrad::cuda_backend
