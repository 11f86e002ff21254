// cuBLAS's GEMMs on a column-major reference in double, queued on the handle's stream.
//
// Every call is first checked as cuBLAS documents it (cublas<t>gemm, cublasGemmEx and their
// strided-batched forms): a live handle used on its own device, m, n, k and the batch count >= 0,
// lda >= max(1, rows of op(A)), ldb >= max(1, rows of op(B)), ldc >= max(1, m), a supported
// combination of data and compute types. Beyond cuBLAS, each matrix (every batch of it) must lie
// inside one device allocation of the handle's device, so a leading dimension or batch stride that
// is wrong but still large enough fails loudly instead of reading a neighbour's memory.
// As in cuBLAS, C is not read when beta == 0, and TF32 rounds the f32 inputs to 10-bit mantissas.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "blas_reference.h"
#include "emulator.h"

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace tapegrad_emu {
namespace {

std::set<cublasHandle_t>& handles() {
  static auto* live = new std::set<cublasHandle_t>();
  return *live;
}

thread_local cublasStatus_t tls_status = CUBLAS_STATUS_SUCCESS;
thread_local std::string tls_detail;
thread_local std::string tls_text;

}  // namespace

// Shared with cublaslt.cpp (blas_reference.h).
cublasStatus_t reject(cublasStatus_t status, const std::string& detail) {
  tls_status = status;
  tls_detail = detail;
  std::fprintf(stderr, "[cuda emulator] cuBLAS: %s\n", detail.c_str());
  return status;
}

size_t element_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_64F:
      return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
  }
  return 0;
}

double load(const void* p, cudaDataType t, int64_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_64F:
      return static_cast<const double*>(p)[i];
    case CUDA_R_16F:
      return static_cast<float>(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF:
      return static_cast<float>(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0;
}

void store(void* p, cudaDataType t, int64_t i, double v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case CUDA_R_64F:
      static_cast<double*>(p)[i] = v;
      return;
    case CUDA_R_16F:
      static_cast<__half*>(p)[i] = __half(static_cast<float>(v));
      return;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(p)[i] = __nv_bfloat16(static_cast<float>(v));
      return;
  }
}

// f32 -> TF32: round to nearest even at 10 mantissa bits, as the tensor cores read it.
double to_tf32(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) {
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
  }
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

struct Gemm {
  const char* call;
  cublasHandle_t handle;
  cublasOperation_t transa, transb;
  int64_t m, n, k;
  double alpha, beta;
  const void* a;
  int64_t lda, stride_a;
  const void* b;
  int64_t ldb, stride_b;
  void* c;
  int64_t ldc, stride_c;
  int64_t batch;
  cudaDataType type;  // of C
  bool tf32;
  cudaDataType ab_type;  // of A and B: C's, or 16-bit with a float C
};

// The bytes a column-major rows x cols matrix with leading dimension ld spans, batches included.
bool inside_allocation(const void* p, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch,
                       size_t elem, int device) {
  if (rows == 0 || cols == 0 || batch == 0) return true;
  const int64_t span = (cols - 1) * ld + rows;
  const int64_t last = (batch - 1) * (stride < 0 ? -stride : stride);
  const Allocation* a = find_allocation(p, static_cast<size_t>(span + last) * elem);
  return a != nullptr && a->device == device;
}

std::string matrix_text(const char* name, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return std::string(name) + " (" + std::to_string(rows) + " x " + std::to_string(cols) + ", ld " + std::to_string(ld) +
         (batch > 1 ? ", batch stride " + std::to_string(stride) + ", " + std::to_string(batch) + " batches" : "") +
         ")";
}

cublasStatus_t run_gemm(const Gemm& g) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const std::string call = g.call;
  if (g.handle == nullptr || handles().count(g.handle) == 0)
    return reject(CUBLAS_STATUS_NOT_INITIALIZED, call + ": not a live handle");
  const int device = g.handle->device;
  if (current_device() != device)
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": the handle belongs to cuda:" + std::to_string(device) +
                                                   " but cuda:" + std::to_string(current_device()) + " is current");
  for (cublasOperation_t op : {g.transa, g.transb})
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
      return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": transa/transb is not N, T or C");
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0)
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": negative m, n, k or batch count (m " + std::to_string(g.m) +
                                                   ", n " + std::to_string(g.n) + ", k " + std::to_string(g.k) + ")");
  const int64_t a_rows = g.transa == CUBLAS_OP_N ? g.m : g.k, a_cols = g.transa == CUBLAS_OP_N ? g.k : g.m;
  const int64_t b_rows = g.transb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.transb == CUBLAS_OP_N ? g.n : g.k;
  if (g.lda < std::max<int64_t>(1, a_rows))
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": lda " + std::to_string(g.lda) + " < max(1, " +
                                                   std::to_string(a_rows) + ") for op(A) of " + std::to_string(a_rows) +
                                                   " rows");
  if (g.ldb < std::max<int64_t>(1, b_rows))
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": ldb " + std::to_string(g.ldb) + " < max(1, " +
                                                   std::to_string(b_rows) + ") for op(B) of " + std::to_string(b_rows) +
                                                   " rows");
  if (g.ldc < std::max<int64_t>(1, g.m))
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": ldc " + std::to_string(g.ldc) + " < max(1, m = " + std::to_string(g.m) + ")");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t elem = element_size(g.type), ab_elem = element_size(g.ab_type);
  const bool reads_ab = g.k > 0 && g.alpha != 0.0;
  if (reads_ab && !inside_allocation(g.a, a_rows, a_cols, g.lda, g.stride_a, g.batch, ab_elem, device))
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": " + matrix_text("A", a_rows, a_cols, g.lda, g.stride_a, g.batch) +
                      " does not lie inside one allocation of cuda:" + std::to_string(device));
  if (reads_ab && !inside_allocation(g.b, b_rows, b_cols, g.ldb, g.stride_b, g.batch, ab_elem, device))
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": " + matrix_text("B", b_rows, b_cols, g.ldb, g.stride_b, g.batch) +
                      " does not lie inside one allocation of cuda:" + std::to_string(device));
  if (!inside_allocation(g.c, g.m, g.n, g.ldc, g.stride_c, g.batch, elem, device))
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": " + matrix_text("C", g.m, g.n, g.ldc, g.stride_c, g.batch) +
                      " does not lie inside one allocation of cuda:" + std::to_string(device));
  CUstream_st* stream = resolve_stream(g.handle->stream);
  if (stream == nullptr) return reject(CUBLAS_STATUS_EXECUTION_FAILED, call + ": the handle's stream was destroyed");
  const Gemm work = g;
  enqueue(stream, [work, a_rows, b_rows, device] {
    const Gemm& w = work;
    std::vector<double> ad(static_cast<size_t>(w.m * w.k)), bd(static_cast<size_t>(w.n * w.k));
    for (int64_t batch = 0; batch < w.batch; ++batch) {
      const int64_t ao = batch * w.stride_a, bo = batch * w.stride_b, co = batch * w.stride_c;
      if (w.k > 0 && w.alpha != 0.0) {
        // op(A) as rows of k, op(B) as columns of k, so each C element is one contiguous dot product.
        for (int64_t i = 0; i < w.m; ++i)
          for (int64_t p = 0; p < w.k; ++p) {
            const int64_t at = w.transa == CUBLAS_OP_N ? i + p * w.lda : p + i * w.lda;
            double v = load(w.a, w.ab_type, ao + at);
            ad[static_cast<size_t>(i * w.k + p)] = w.tf32 ? to_tf32(v) : v;
          }
        for (int64_t j = 0; j < w.n; ++j)
          for (int64_t p = 0; p < w.k; ++p) {
            const int64_t at = w.transb == CUBLAS_OP_N ? p + j * w.ldb : j + p * w.ldb;
            double v = load(w.b, w.ab_type, bo + at);
            bd[static_cast<size_t>(j * w.k + p)] = w.tf32 ? to_tf32(v) : v;
          }
      }
      for (int64_t j = 0; j < w.n; ++j) {
        for (int64_t i = 0; i < w.m; ++i) {
          double sum = 0;
          if (w.k > 0 && w.alpha != 0.0) {
            const double* x = &ad[static_cast<size_t>(i * w.k)];
            const double* y = &bd[static_cast<size_t>(j * w.k)];
            for (int64_t p = 0; p < w.k; ++p) sum += x[p] * y[p];
          }
          const int64_t at = co + i + j * w.ldc;
          double out = w.alpha * sum;
          if (w.beta != 0.0) out += w.beta * load(w.c, w.type, at);
          store(w.c, w.type, at, out);
        }
      }
    }
    (void)a_rows, (void)b_rows;
    check_allocation_guards(device, "a cuBLAS product");
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_types(const char* call, cudaDataType a, cudaDataType b, cudaDataType c,
                           cublasComputeType_t compute, cublasMath_t math, bool* tf32) {
  // cuBLAS's mixed combinations with a float C: 16F x 16F and 16BF x 16BF, computed in 32F.
  const bool mixed = a == b && c == CUDA_R_32F && (a == CUDA_R_16F || a == CUDA_R_16BF);
  if (mixed && compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED,
                  std::string(call) + ": 16-bit A and B with a float C need compute type 32F");
  if (a != b || (b != c && !mixed))
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, std::string(call) +
                                                   ": this combination of A, B and C types is not "
                                                   "supported (A and B must match; C too, or be float "
                                                   "with 16-bit A and B)");
  *tf32 = false;
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (a == CUDA_R_64F) break;
      *tf32 = a == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F && math == CUBLAS_TF32_TENSOR_OP_MATH;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      if (a != CUDA_R_32F) break;
      *tf32 = true;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_64F:
      if (a == CUDA_R_64F) return CUBLAS_STATUS_SUCCESS;
      break;
    default:
      break;
  }
  return reject(CUBLAS_STATUS_NOT_SUPPORTED, std::string(call) + ": compute type " + std::to_string(compute) +
                                                 " is not valid for data type " + std::to_string(a));
}

// Host pointer mode: alpha and beta are read at the call, in the compute type (double for 64F).
double scalar(const void* p, bool is_double) {
  return is_double ? *static_cast<const double*>(p) : *static_cast<const float*>(p);
}

// cublasGemmEx and its strided-batched form: types checked, then the common product.
cublasStatus_t gemm_ex(const char* call, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                       int64_t m, int64_t n, int64_t k, const void* alpha, const void* A, cudaDataType Atype,
                       int64_t lda, int64_t strideA, const void* B, cudaDataType Btype, int64_t ldb, int64_t strideB,
                       const void* beta, void* C, cudaDataType Ctype, int64_t ldc, int64_t strideC, int64_t batchCount,
                       cublasComputeType_t computeType) {
  if (alpha == nullptr || beta == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": null alpha or beta");
  const cublasMath_t math = handles().count(handle) != 0 ? handle->math : CUBLAS_DEFAULT_MATH;
  bool tf32 = false;
  cublasStatus_t s = check_types(call, Atype, Btype, Ctype, computeType, math, &tf32);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const bool is_double = computeType == CUBLAS_COMPUTE_64F;
  return run_gemm({call,
                   handle,
                   transa,
                   transb,
                   m,
                   n,
                   k,
                   scalar(alpha, is_double),
                   scalar(beta, is_double),
                   A,
                   lda,
                   strideA,
                   B,
                   ldb,
                   strideB,
                   C,
                   ldc,
                   strideC,
                   batchCount,
                   Ctype,
                   tf32,
                   Atype});
}

}  // namespace
}  // namespace tapegrad_emu

using namespace tapegrad_emu;

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handle == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: null");
  if (device_count() == 0) return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate: no device");
  auto* h = new cublasContext();
  h->device = current_device();
  handles().insert(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handles().erase(handle) == 0) return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: not a live handle");
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handles().count(handle) == 0) return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: not a live handle");
  if (stream != nullptr) {
    CUstream_st* s = resolve_stream(stream);
    if (s == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: not a live stream");
    if (s->device != handle->device)
      return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: a stream of cuda:" + std::to_string(s->device) +
                                                     " for a handle of cuda:" + std::to_string(handle->device));
  }
  handle->stream = stream;
  handle->workspace = nullptr;  // as in cuBLAS: setting the stream drops a user workspace
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handles().count(handle) == 0) return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetStream: not a live handle");
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handles().count(handle) == 0)
    return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetWorkspace: not a live handle");
  if (bytes > 0) {
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
      return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace: the workspace is not 256-byte aligned");
    const Allocation* a = find_allocation(workspace, bytes);
    if (a == nullptr || a->device != handle->device)
      return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace: " + std::to_string(bytes) +
                                                     " bytes at the workspace pointer are not device memory of cuda:" +
                                                     std::to_string(handle->device));
  }
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handles().count(handle) == 0)
    return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode: not a live handle");
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handles().count(handle) == 0)
    return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetMathMode: not a live handle");
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// cuBLAS's text, followed by the emulator's reason for the calling thread's latest failure.
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      tls_text = "success";
      break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      tls_text = "the library was not initialized";
      break;
    case CUBLAS_STATUS_ALLOC_FAILED:
      tls_text = "the resource allocation failed";
      break;
    case CUBLAS_STATUS_INVALID_VALUE:
      tls_text = "an invalid numeric value was used as an argument";
      break;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      tls_text = "the GPU program failed to execute";
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      tls_text = "the functionality requested is not supported";
      break;
    default:
      tls_text = cublasGetStatusName(status);
      break;
  }
  if (status != CUBLAS_STATUS_SUCCESS && status == tls_status && !tls_detail.empty())
    tls_text += " [cuda emulator: " + tls_detail + "]";
  return tls_text.c_str();
}

cublasStatus_t cublasSgemm_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                              int64_t n, int64_t k, const float* alpha, const float* A, int64_t lda, const float* B,
                              int64_t ldb, const float* beta, float* C, int64_t ldc) {
  if (alpha == nullptr || beta == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm: null alpha or beta");
  const bool tf32 = handles().count(handle) != 0 && handle->math == CUBLAS_TF32_TENSOR_OP_MATH;
  return run_gemm({"cublasSgemm", handle, transa, transb, m, n, k,          *alpha, *beta,     A, lda, 0, B,
                   ldb,           0,      C,      ldc,    0, 1, CUDA_R_32F, tf32,   CUDA_R_32F});
}

cublasStatus_t cublasDgemm_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                              int64_t n, int64_t k, const double* alpha, const double* A, int64_t lda, const double* B,
                              int64_t ldb, const double* beta, double* C, int64_t ldc) {
  if (alpha == nullptr || beta == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasDgemm: null alpha or beta");
  return run_gemm({"cublasDgemm", handle, transa, transb, m, n, k,          *alpha, *beta,     A, lda, 0, B,
                   ldb,           0,      C,      ldc,    0, 1, CUDA_R_64F, false,  CUDA_R_64F});
}

cublasStatus_t cublasDgemmStridedBatched_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                            int64_t m, int64_t n, int64_t k, const double* alpha, const double* A,
                                            int64_t lda, int64_t strideA, const double* B, int64_t ldb, int64_t strideB,
                                            const double* beta, double* C, int64_t ldc, int64_t strideC,
                                            int64_t batchCount) {
  if (alpha == nullptr || beta == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasDgemmStridedBatched: null alpha or beta");
  return run_gemm({"cublasDgemmStridedBatched",
                   handle,
                   transa,
                   transb,
                   m,
                   n,
                   k,
                   *alpha,
                   *beta,
                   A,
                   lda,
                   strideA,
                   B,
                   ldb,
                   strideB,
                   C,
                   ldc,
                   strideC,
                   batchCount,
                   CUDA_R_64F,
                   false,
                   CUDA_R_64F});
}

cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                               int64_t n, int64_t k, const void* alpha, const void* A, cudaDataType Atype, int64_t lda,
                               const void* B, cudaDataType Btype, int64_t ldb, const void* beta, void* C,
                               cudaDataType Ctype, int64_t ldc, cublasComputeType_t computeType,
                               cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_ex("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                 Ctype, ldc, 0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                             int64_t m, int64_t n, int64_t k, const void* alpha, const void* A,
                                             cudaDataType Atype, int64_t lda, int64_t strideA, const void* B,
                                             cudaDataType Btype, int64_t ldb, int64_t strideB, const void* beta,
                                             void* C, cudaDataType Ctype, int64_t ldc, int64_t strideC,
                                             int64_t batchCount, cublasComputeType_t computeType,
                                             cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_ex("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
                 ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}

}  // extern "C"
