// cuBLASLt's matmul with the epilogues tapegrad uses (DEFAULT, RELU, BIAS, RELU_BIAS, BGRADA,
// BGRADB), on a column-major reference in double, queued on the call's stream.
//
// Checked as cuBLASLt documents it: live handle and descriptors; attribute buffers of the
// attribute's size; layouts that fit op(A) [m, k], op(B) [k, n], C and D [m, n] with
// ld >= max(1, rows); in-place C == D only with identical C and D layouts; the type combinations
// of cublasGemmEx with a matching scale type; a bias pointer for every bias epilogue, of D's type
// (the default bias type). An algorithm is valid only for the problem it was chosen for (the
// descriptor's settings and the layouts, not the pointers) and only for pointers at least as
// aligned as the heuristic was told: the preference's minimum alignments (default 256 bytes), and
// for the bias the alignment of the bias pointer the descriptor held when the heuristic ran. The
// workspace must be at least the algorithm's. Beyond cuBLASLt, every matrix, the bias vector and
// the workspace must lie inside one device allocation of the handle's device. Emulated subset:
// column order, batch count 1, host pointer mode.
#include "cublasLt.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blas_reference.h"
#include "cuda_emulator/cublaslt_control.h"
#include "emulator.h"

struct cublasLtContext {
  int device = 0;
};

struct cublasLtMatrixLayoutOpaque_t {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};

struct cublasLtMatmulDescOpaque_t {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale = CUDA_R_32F;
  int32_t pointer_mode = 0;  // host
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  int32_t bias_type = -1;  // -1: D's type
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace tapegrad_emu {
namespace {

enum class Kind { Handle, Layout, Desc, Pref };

std::map<const void*, Kind>& live() {
  static auto* objects = new std::map<const void*, Kind>();
  return *objects;
}
bool is_live(const void* p, Kind kind) {
  auto found = live().find(p);
  return p != nullptr && found != live().end() && found->second == kind;
}

std::map<uint32_t, int64_t>& matmul_counts() {
  static auto* counts = new std::map<uint32_t, int64_t>();
  return *counts;
}

constexpr uint64_t kAlgoMagic = 0x4c74416c676f3031ull;  // "LtAlgo01"
// A split-k algorithm (with a workspace) for long inner products when the preference allows one,
// so that callers' workspace handling is exercised.
constexpr uint64_t kSplitKWorkspace = uint64_t{1} << 20;
constexpr int64_t kSplitKMinK = 256;

// An attribute write: the buffer must be there and have the attribute's exact size.
template <typename T>
cublasStatus_t set_attribute(const char* call, int attr, const void* buf, size_t size, T* field) {
  if (buf == nullptr || size != sizeof(T))
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  std::string(call) + ": attribute " + std::to_string(attr) + " takes " + std::to_string(sizeof(T)) +
                      " bytes, got " + (buf == nullptr ? std::string("a null buffer") : std::to_string(size)));
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_BGRADA || epilogue == CUBLASLT_EPILOGUE_BGRADB;
}

uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// A problem as the descriptor and the layouts define it.
struct Problem {
  const cublasLtMatmulDescOpaque_t* desc;
  const cublasLtMatrixLayoutOpaque_t *a, *b, *c, *d;
  int64_t m = 0, n = 0, k = 0;
  cudaDataType ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  bool tf32 = false;
  int64_t bias_length = 0;
  uint64_t signature = 0;
};

std::string layout_text(const char* name, const cublasLtMatrixLayoutOpaque_t* l) {
  return std::string(name) + " (" + std::to_string(l->rows) + " x " + std::to_string(l->cols) + ", ld " +
         std::to_string(l->ld) + ")";
}

uint64_t fnv(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

cublasStatus_t check_problem(const std::string& call, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                             cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, Problem* p) {
  if (!is_live(desc, Kind::Desc)) return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": not a live matmul descriptor");
  const std::pair<const char*, cublasLtMatrixLayout_t> layouts[] = {{"A", a}, {"B", b}, {"C", c}, {"D", d}};
  for (const auto& [name, layout] : layouts) {
    if (!is_live(layout, Kind::Layout))
      return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": " + name + " is not a live matrix layout");
    if (layout->order != CUBLASLT_ORDER_COL || layout->batch_count != 1)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED,
                    call + ": the emulator runs column-order layouts with batch count 1 only (" + name + ")");
    if (layout->ld < static_cast<int64_t>(std::max<uint64_t>(1, layout->rows)))
      return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": " + layout_text(name, layout) + " has ld < max(1, rows)");
  }
  for (int32_t op : {desc->transa, desc->transb})
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": transa/transb must be N or T for real types");
  if (desc->transc != CUBLAS_OP_N)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": only CUBLAS_OP_N is supported for C");
  if (desc->pointer_mode != 0)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": the emulator supports the host pointer mode only");
  p->desc = desc, p->a = a, p->b = b, p->c = c, p->d = d;
  p->m = static_cast<int64_t>(d->rows);
  p->n = static_cast<int64_t>(d->cols);
  p->k = static_cast<int64_t>(desc->transa == CUBLAS_OP_N ? a->cols : a->rows);
  const uint64_t a_m = desc->transa == CUBLAS_OP_N ? a->rows : a->cols;
  const uint64_t b_k = desc->transb == CUBLAS_OP_N ? b->rows : b->cols;
  const uint64_t b_n = desc->transb == CUBLAS_OP_N ? b->cols : b->rows;
  if (a_m != d->rows || b_n != d->cols || b_k != static_cast<uint64_t>(p->k) || c->rows != d->rows ||
      c->cols != d->cols)
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": the layouts do not fit op(A) [m, k] x op(B) [k, n] = C, D [m, n]: " + layout_text("A", a) +
                      (desc->transa == CUBLAS_OP_N ? "" : "^T") + ", " + layout_text("B", b) +
                      (desc->transb == CUBLAS_OP_N ? "" : "^T") + ", " + layout_text("C", c) + ", " +
                      layout_text("D", d));
  // Types: cublasGemmEx's combinations.
  const auto at = static_cast<cudaDataType>(a->type), bt = static_cast<cudaDataType>(b->type);
  const auto ct = static_cast<cudaDataType>(c->type), dt = static_cast<cudaDataType>(d->type);
  if (ct != dt) return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": C and D must have the same type");
  const bool mixed = at == bt && dt == CUDA_R_32F && (at == CUDA_R_16F || at == CUDA_R_16BF);
  if (at != bt || (at != dt && !mixed) || element_size(at) == 0)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": this combination of A, B and D types is not supported");
  const int32_t compute = desc->compute;
  bool valid = false;
  if (at == CUDA_R_64F) valid = compute == CUBLAS_COMPUTE_64F && desc->scale == CUDA_R_64F;
  if (at == CUDA_R_32F)
    valid = (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
             compute == CUBLAS_COMPUTE_32F_FAST_TF32) &&
            desc->scale == CUDA_R_32F;
  if (at == CUDA_R_16F || at == CUDA_R_16BF)
    valid = (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC) && desc->scale == CUDA_R_32F;
  if (!valid)
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": compute type " + std::to_string(compute) +
                                                   " with scale type " + std::to_string(desc->scale) +
                                                   " is not valid for data type " + std::to_string(at));
  p->ab_type = at, p->d_type = dt;
  p->tf32 = at == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  // The epilogue and its bias vector.
  const uint32_t e = desc->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_RELU && !has_bias(e))
    return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": epilogue " + std::to_string(e) + " is not emulated");
  if (has_bias(e)) {
    if (desc->bias == nullptr)
      return reject(CUBLAS_STATUS_INVALID_VALUE,
                    call + ": epilogue " + std::to_string(e) + " needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (desc->bias_type != -1 && desc->bias_type != static_cast<int32_t>(dt))
      return reject(CUBLAS_STATUS_NOT_SUPPORTED, call + ": the bias type must be D's type");
    p->bias_length = e == CUBLASLT_EPILOGUE_BGRADB ? p->n : p->m;
  }
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : {int64_t{desc->compute}, int64_t{desc->scale}, int64_t{desc->transa}, int64_t{desc->transb},
                    int64_t{e}, int64_t{desc->bias_type}})
    h = fnv(h, v);
  for (const auto& [name, l] : layouts) {
    (void)name;
    for (int64_t v : {int64_t{l->type}, static_cast<int64_t>(l->rows), static_cast<int64_t>(l->cols), l->ld})
      h = fnv(h, v);
  }
  p->signature = h;
  return CUBLAS_STATUS_SUCCESS;
}

bool inside(const void* ptr, int64_t rows, int64_t cols, int64_t ld, size_t elem, int device) {
  if (rows == 0 || cols == 0) return true;
  const Allocation* a = find_allocation(ptr, static_cast<size_t>((cols - 1) * ld + rows) * elem);
  return a != nullptr && a->device == device;
}

struct Work {
  Problem p;
  uint32_t epilogue;
  double alpha, beta;
  const void *a, *b, *c, *bias;
  void* d;
};

// D = alpha op(A) op(B) + beta C, then the epilogue; in double, on the stream.
void run(const Work& w, int device) {
  const Problem& p = w.p;
  const int64_t m = p.m, n = p.n, k = p.k;
  const bool ta = p.desc->transa != CUBLAS_OP_N, tb = p.desc->transb != CUBLAS_OP_N;
  std::vector<double> ad(static_cast<size_t>(m * k)), bd(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q)
      ad[static_cast<size_t>(i * k + q)] = load(w.a, p.ab_type, ta ? q + i * p.a->ld : i + q * p.a->ld);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t q = 0; q < k; ++q)
      bd[static_cast<size_t>(j * k + q)] = load(w.b, p.ab_type, tb ? j + q * p.b->ld : q + j * p.b->ld);
  const bool add_bias = w.epilogue == CUBLASLT_EPILOGUE_BIAS || w.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu = w.epilogue == CUBLASLT_EPILOGUE_RELU || w.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0;
      const double* x = &ad[static_cast<size_t>(i * k)];
      const double* y = &bd[static_cast<size_t>(j * k)];
      for (int64_t q = 0; q < k; ++q) sum += (p.tf32 ? to_tf32(x[q]) * to_tf32(y[q]) : x[q] * y[q]);
      double out = w.alpha * sum;
      if (w.beta != 0.0) out += w.beta * load(w.c, p.d_type, i + j * p.c->ld);
      if (add_bias) out += load(w.bias, p.d_type, i);
      if (relu && out < 0) out = 0;
      store(w.d, p.d_type, i + j * p.d->ld, out);
    }
  }
  // The bias gradients: sums over k of op(A)'s rows (BGRADA) or of op(B)'s columns (BGRADB).
  if (w.epilogue == CUBLASLT_EPILOGUE_BGRADA || w.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    const bool of_a = w.epilogue == CUBLASLT_EPILOGUE_BGRADA;
    const std::vector<double>& src = of_a ? ad : bd;
    for (int64_t i = 0; i < (of_a ? m : n); ++i) {
      double sum = 0;
      for (int64_t q = 0; q < k; ++q) sum += src[static_cast<size_t>(i * k + q)];
      store(const_cast<void*>(w.bias), p.d_type, i, sum);
    }
  }
  check_allocation_guards(device, "a cuBLASLt product");
}

}  // namespace

int64_t cublaslt_matmul_count(unsigned epilogue) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  auto found = matmul_counts().find(epilogue);
  return found == matmul_counts().end() ? 0 : found->second;
}

}  // namespace tapegrad_emu

using namespace tapegrad_emu;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (handle == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: null");
  if (device_count() == 0) return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtCreate: no device");
  auto* h = new cublasLtContext();
  h->device = current_device();
  live()[h] = Kind::Handle;
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (!is_live(handle, Kind::Handle))
    return reject(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: not a live handle");
  live().erase(handle);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (layout == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: null");
  auto* l = new cublasLtMatrixLayoutOpaque_t();
  l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
  live()[l] = Kind::Layout;
  *layout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (!is_live(layout, Kind::Layout))
    return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy: not a live layout");
  live().erase(layout);
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const char* call = "cublasLtMatrixLayoutSetAttribute";
  if (!is_live(layout, Kind::Layout))
    return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": not a live layout");
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return set_attribute(call, attr, buf, size, &layout->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return set_attribute(call, attr, buf, size, &layout->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return set_attribute(call, attr, buf, size, &layout->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return set_attribute(call, attr, buf, size, &layout->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return set_attribute(call, attr, buf, size, &layout->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return set_attribute(call, attr, buf, size, &layout->batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return set_attribute(call, attr, buf, size, &layout->batch_stride);
  }
  return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": unknown attribute " + std::to_string(attr));
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (desc == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: null");
  auto* d = new cublasLtMatmulDescOpaque_t();
  d->compute = compute, d->scale = scale;
  live()[d] = Kind::Desc;
  *desc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (!is_live(desc, Kind::Desc))
    return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy: not a live descriptor");
  live().erase(desc);
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const char* call = "cublasLtMatmulDescSetAttribute";
  if (!is_live(desc, Kind::Desc))
    return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": not a live descriptor");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return set_attribute(call, attr, buf, size, &desc->compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return set_attribute(call, attr, buf, size, &desc->scale);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return set_attribute(call, attr, buf, size, &desc->pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set_attribute(call, attr, buf, size, &desc->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set_attribute(call, attr, buf, size, &desc->transb);
    case CUBLASLT_MATMUL_DESC_TRANSC:
      return set_attribute(call, attr, buf, size, &desc->transc);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set_attribute(call, attr, buf, size, &desc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set_attribute(call, attr, buf, size, &desc->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return set_attribute(call, attr, buf, size, &desc->bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set_attribute(call, attr, buf, size, &desc->bias_type);
  }
  return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": unknown attribute " + std::to_string(attr));
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (pref == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: null");
  auto* p = new cublasLtMatmulPreferenceOpaque_t();
  live()[p] = Kind::Pref;
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  if (!is_live(pref, Kind::Pref))
    return reject(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy: not a live preference");
  live().erase(pref);
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const char* call = "cublasLtMatmulPreferenceSetAttribute";
  if (!is_live(pref, Kind::Pref))
    return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": not a live preference");
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return set_attribute(call, attr, buf, size, &pref->search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set_attribute(call, attr, buf, size, &pref->max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return set_attribute(call, attr, buf, size, &pref->alignment[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return set_attribute(call, attr, buf, size, &pref->alignment[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return set_attribute(call, attr, buf, size, &pref->alignment[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return set_attribute(call, attr, buf, size, &pref->alignment[3]);
  }
  return reject(CUBLAS_STATUS_INVALID_VALUE, std::string(call) + ": unknown attribute " + std::to_string(attr));
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const std::string call = "cublasLtMatmulAlgoGetHeuristic";
  if (!is_live(handle, Kind::Handle)) return reject(CUBLAS_STATUS_NOT_INITIALIZED, call + ": not a live handle");
  if (requested <= 0 || results == nullptr || returned == nullptr)
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": requestedAlgoCount <= 0 or a null result array/count");
  if (!is_live(pref, Kind::Pref)) return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": not a live preference");
  Problem p;
  cublasStatus_t s = check_problem(call, desc, a, b, c, d, &p);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  cublasLtMatmulHeuristicResult_t r{};
  const uint64_t workspace = p.k >= kSplitKMinK && pref->max_workspace >= kSplitKWorkspace ? kSplitKWorkspace : 0;
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = p.signature;
  for (int i = 0; i < 4; ++i) r.algo.data[2 + i] = pref->alignment[i];
  r.algo.data[6] = has_bias(desc->epilogue) ? alignment_of(desc->bias) : 0;
  r.algo.data[7] = workspace;
  r.workspaceSize = workspace;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  results[0] = r;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(state_mutex());
  const std::string call = "cublasLtMatmul";
  if (!is_live(handle, Kind::Handle)) return reject(CUBLAS_STATUS_NOT_INITIALIZED, call + ": not a live handle");
  const int device = handle->device;
  if (current_device() != device)
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": the handle belongs to cuda:" + std::to_string(device) +
                                                   " but cuda:" + std::to_string(current_device()) + " is current");
  Problem p;
  cublasStatus_t s = check_problem(call, desc, a, b, c, d, &p);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (alpha == nullptr || beta == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": null alpha or beta");
  if (algo == nullptr || algo->data[0] != kAlgoMagic)
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": the algorithm does not come from cublasLtMatmulAlgoGetHeuristic");
  if (algo->data[1] != p.signature)
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": the algorithm was chosen for another problem (descriptor or layouts differ)");
  if (C == D && (c->ld != d->ld || c->type != d->type))
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": in place (C == D) needs identical C and D layouts");
  const bool is_double = desc->scale == CUDA_R_64F;
  const double alpha_v = is_double ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double beta_v = is_double ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  // Alignment: what the algorithm was chosen for.
  const std::pair<const char*, const void*> pointers[] = {{"A", A}, {"B", B}, {"C", C}, {"D", D}};
  for (int i = 0; i < 4; ++i)
    if (alignment_of(pointers[i].second) < algo->data[2 + i])
      return reject(CUBLAS_STATUS_INVALID_VALUE,
                    call + ": " + pointers[i].first + " is " + std::to_string(alignment_of(pointers[i].second)) +
                        "-byte aligned, the algorithm was chosen for " + std::to_string(algo->data[2 + i]) + " bytes");
  if (has_bias(desc->epilogue) && alignment_of(desc->bias) < algo->data[6])
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": the bias is " + std::to_string(alignment_of(desc->bias)) +
                                                   "-byte aligned, the algorithm was chosen for " +
                                                   std::to_string(algo->data[6]) + " bytes");
  if (workspace_bytes < algo->data[7])
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": workspace of " + std::to_string(workspace_bytes) +
                                                   " bytes, the algorithm needs " + std::to_string(algo->data[7]));
  if (workspace_bytes > 0) {
    const Allocation* w = find_allocation(workspace, workspace_bytes);
    if (w == nullptr || w->device != device)
      return reject(CUBLAS_STATUS_INVALID_VALUE,
                    call + ": " + std::to_string(workspace_bytes) +
                        " bytes at the workspace pointer are not device memory of cuda:" + std::to_string(device));
  }
  // Every operand inside one allocation of the handle's device.
  const size_t ab = element_size(p.ab_type), de = element_size(p.d_type);
  const bool reads_ab = p.k > 0 && alpha_v != 0.0 && p.m > 0 && p.n > 0;
  if (reads_ab && !inside(A, a->rows, a->cols, a->ld, ab, device))
    return reject(
        CUBLAS_STATUS_INVALID_VALUE,
        call + ": " + layout_text("A", a) + " does not lie inside one allocation of cuda:" + std::to_string(device));
  if (reads_ab && !inside(B, b->rows, b->cols, b->ld, ab, device))
    return reject(
        CUBLAS_STATUS_INVALID_VALUE,
        call + ": " + layout_text("B", b) + " does not lie inside one allocation of cuda:" + std::to_string(device));
  if (beta_v != 0.0 && !inside(C, c->rows, c->cols, c->ld, de, device))
    return reject(
        CUBLAS_STATUS_INVALID_VALUE,
        call + ": " + layout_text("C", c) + " does not lie inside one allocation of cuda:" + std::to_string(device));
  if (!inside(D, d->rows, d->cols, d->ld, de, device))
    return reject(
        CUBLAS_STATUS_INVALID_VALUE,
        call + ": " + layout_text("D", d) + " does not lie inside one allocation of cuda:" + std::to_string(device));
  if (has_bias(desc->epilogue) &&
      !inside(desc->bias, p.bias_length, 1, std::max<int64_t>(1, p.bias_length), de, device))
    return reject(CUBLAS_STATUS_INVALID_VALUE,
                  call + ": the bias vector of " + std::to_string(p.bias_length) +
                      " elements does not lie inside one allocation of cuda:" + std::to_string(device));
  CUstream_st* st = resolve_stream(stream);
  if (st == nullptr) return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": not a live stream");
  if (st->device != device)
    return reject(CUBLAS_STATUS_INVALID_VALUE, call + ": a stream of cuda:" + std::to_string(st->device) +
                                                   " for a handle of cuda:" + std::to_string(device));
  ++matmul_counts()[desc->epilogue];
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  // The work reads the descriptors when it runs; copy them, as cuBLASLt captures them at the call.
  auto desc_copy = std::make_shared<cublasLtMatmulDescOpaque_t>(*desc);
  auto layouts = std::make_shared<std::vector<cublasLtMatrixLayoutOpaque_t>>(
      std::vector<cublasLtMatrixLayoutOpaque_t>{*a, *b, *c, *d});
  enqueue(st, [=] {
    Work w{p, desc_copy->epilogue, alpha_v, beta_v, A, B, C, desc_copy->bias, D};
    w.p.desc = desc_copy.get();
    w.p.a = &(*layouts)[0], w.p.b = &(*layouts)[1], w.p.c = &(*layouts)[2], w.p.d = &(*layouts)[3];
    run(w, device);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
