// gemm_bias, gemm_bias_relu and gemm_bias_grad through cuBLASLt: a linear layer's bias add
// (CUBLASLT_EPILOGUE_BIAS, and RELU_BIAS for linear_relu) and bias gradient
// (CUBLASLT_EPILOGUE_BGRADB) done in the GEMM's epilogue, which saves the forward its bias copy
// (and the ReLU its pass over the output) and the backward its ones-vector GEMM and fill.
//
// Note [row-major products on cuBLASLt]: as in blas.cpp, out [n, m] = a [n, k] @ b [k, m] runs as
// the column-major D [m, n] = op(A) [m, k] op(B) [k, n] with cuBLASLt's A our b, its B our a and
// D our out. BIAS adds one value per row of D, so per column of out (bias [m]); BGRADB sums op(B)
// over k for each column of D, so each row of a (grad_bias [n]).
//
// When it applies: out of f32, f16 or bf16 (under autocast a 16-bit out, or f32 for a weight
// gradient, with float32 operands lowered on the device first as gemm_mixed does); a and b each with unit stride along
// one dim, so no copy is needed; out and the bias contiguous; every pointer 16-byte aligned; n, m and k at least 2 and
// within int32 (PyTorch's rule for its cuBLASLt path: the heuristics reject or mishandle some unit dimensions).
// Anything else, or a problem the heuristic refuses, takes the plain path: gemm onto the copied bias, or gemm plus a
// row-sum GEMM.
//
// Plans: the descriptor, layouts, preference and the heuristic's algorithm are made once per
// problem (dtypes, math, transposes, sizes, leading dimensions, epilogue, bias alignment) and kept
// per thread, since the bias pointer is written into the descriptor before each call. The cuBLASLt
// handle (one per device, for the life of the process: Note [cuBLAS handles]) has no stream or
// workspace of its own; each call gets its stream and a workspace from the caching allocator.
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "backend/kernel_tensors.h"
#include "blas/cublas_handle.h"
#include "blas/cublas_loader.h"
#include "kernels/launch.h"
#include "register.h"
#include "tapegrad/cuda/blas_settings.h"
#include "tapegrad/cuda/counters.h"
#include "tapegrad/cuda/device.h"

namespace tapegrad::cuda_backend {

namespace {

constexpr size_t kMaxWorkspaceBytes = size_t{32} << 20;  // as cublas_handle.cpp's
constexpr uint32_t kAlignment = 16;
constexpr int64_t kMaxDim = INT32_MAX;

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>;  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  cublasLtHandle_t& handle = (*handles)[device];
  if (handle == nullptr) TG_CUBLAS_CHECK(cublas_api().lt_create(&handle), "linear");
  return handle;
}

// A matrix as cuBLASLt reads it without a copy (see as_operand in blas.cpp): N with ld = the row
// stride when columns are unit-stride, T with ld = the column stride when rows are.
struct LtOperand {
  cublasOperation_t op;
  int64_t ld;
};

std::optional<LtOperand> lt_operand(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1), s_row = t.stride(0), s_col = t.stride(1);
  if (s_col == 1 && s_row >= cols) return LtOperand{CUBLAS_OP_N, s_row};
  if (s_row == 1 && s_col >= rows) return LtOperand{CUBLAS_OP_T, s_col};
  return std::nullopt;
}

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kAlignment == 0;
}

uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > kAlignment && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

cudaDataType lt_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// Whether the fused product can run on these tensors. Under autocast an operand of float32 is
// lowered to the products' type on the device first (as gemm_mixed does) and one already of that
// type (an autocast output) is used as it is; an input bias of float32 under a 16-bit out is lowered
// too, as PyTorch's autocast casts it. A bias gradient (an output) must have out's type.
bool lt_applies(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias, DType products,
                bool bias_is_input) {
  const DType dtype = out.dtype();
  const bool low = products == kBFloat16 || products == kFloat16;
  const bool plain = products == dtype && (dtype == kFloat32 || low);
  const bool mixed = dtype == kFloat32 && low;
  if (!(plain || mixed)) return false;
  auto takes = [&](const Tensor& t) { return t.dtype() == products || (low && t.dtype() == kFloat32); };
  if (!takes(a) || !takes(b)) return false;
  const bool lower_bias = bias.dtype() != dtype;
  if (lower_bias && !(bias_is_input && low && bias.dtype() == kFloat32)) return false;
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  for (int64_t d : {n, k, m})
    if (d < 2 || d > kMaxDim) return false;
  if (!out.is_contiguous() || !aligned(out.data_ptr())) return false;
  if (!lower_bias && (!bias.is_contiguous() || !aligned(bias.data_ptr()))) return false;
  // The lowered copies are contiguous and freshly allocated; the rest must be readable as they are.
  for (const Tensor* t : {&a, &b}) {
    if (t->dtype() != products) continue;
    const std::optional<LtOperand> o = lt_operand(*t);
    if (!o || o->ld > kMaxDim || !aligned(t->data_ptr())) return false;
  }
  return true;
}

// What a plan is made for: operand and output types, compute type, transposes, sizes, leading
// dimensions, epilogue, and the bias alignment the heuristic saw.
using PlanKey = std::array<int64_t, 12>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLASLt's A, B, and C = D
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool found = false;  // whether the heuristic had an algorithm; if not, the plain path
};

// This thread's plans; descriptors are host memory only, so freeing them at thread exit is safe.
struct PlanCache {
  std::map<PlanKey, Plan> plans;
  ~PlanCache() {
    for (auto& [key, p] : plans) {
      (void)key;
      cublas_api().lt_matmul_preference_destroy(p.preference);
      cublas_api().lt_matrix_layout_destroy(p.a);
      cublas_api().lt_matrix_layout_destroy(p.b);
      cublas_api().lt_matrix_layout_destroy(p.d);
      cublas_api().lt_matmul_desc_destroy(p.desc);
    }
  }
};
thread_local PlanCache t_plans;

struct Problem {
  cudaDataType ab_type, d_type;
  cublasComputeType_t compute;
  LtOperand lt_a, lt_b;  // cuBLASLt's A (our b) and B (our a)
  int64_t m, n, k;
  cublasLtEpilogue_t epilogue;
  const void* bias;
};

#define TG_LT_CHECK(call) TG_CUBLAS_CHECK(call, "linear")

Plan make_plan(cublasLtHandle_t handle, const Problem& p) {
  Plan plan;
  TG_LT_CHECK(cublas_api().lt_matmul_desc_create(&plan.desc, p.compute, CUDA_R_32F));
  const int32_t transa = p.lt_a.op, transb = p.lt_b.op;
  const uint32_t epilogue = p.epilogue;
  TG_LT_CHECK(
      cublas_api().lt_matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  TG_LT_CHECK(
      cublas_api().lt_matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  TG_LT_CHECK(
      cublas_api().lt_matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  // The heuristic reads the bias pointer's alignment (the key holds it).
  TG_LT_CHECK(
      cublas_api().lt_matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  // Stored shapes: op(A) [m, k] and op(B) [k, n], transposed as stored.
  const bool ta = p.lt_a.op == CUBLAS_OP_T, tb = p.lt_b.op == CUBLAS_OP_T;
  TG_LT_CHECK(cublas_api().lt_matrix_layout_create(&plan.a, p.ab_type, ta ? p.k : p.m, ta ? p.m : p.k, p.lt_a.ld));
  TG_LT_CHECK(cublas_api().lt_matrix_layout_create(&plan.b, p.ab_type, tb ? p.n : p.k, tb ? p.k : p.n, p.lt_b.ld));
  TG_LT_CHECK(cublas_api().lt_matrix_layout_create(&plan.d, p.d_type, p.m, p.n, p.m));
  TG_LT_CHECK(cublas_api().lt_matmul_preference_create(&plan.preference));
  const uint64_t max_workspace = kMaxWorkspaceBytes;
  TG_LT_CHECK(cublas_api().lt_matmul_preference_set_attribute(plan.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &max_workspace, sizeof(max_workspace)));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    TG_LT_CHECK(
        cublas_api().lt_matmul_preference_set_attribute(plan.preference, attr, &kAlignment, sizeof(kAlignment)));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublas_api().lt_matmul_algo_get_heuristic(
      handle, plan.desc, plan.a, plan.b, plan.d, plan.d, plan.preference, 1, &result, &returned);
  // No algorithm is an answer, not an error: the plain path runs the problem. cuBLASLt says so with
  // NOT_SUPPORTED, an empty result, or (PyTorch has seen it for unit dimensions) INVALID_VALUE. In
  // the emulation build a refused plan is printed, and the tests count the epilogue calls.
  plan.found = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  plan.algo = result.algo;
  plan.workspace = result.workspaceSize;
  return plan;
}

// out = a @ b with the epilogue's bias vector, through cuBLASLt; false, with nothing done, where
// the fused form does not apply.
bool lt_matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& out, const Tensor& bias_in, DType products,
               cublasLtEpilogue_t epilogue) {
  const bool bias_is_input = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  if (!lt_applies(a_in, b_in, out, bias_in, products, bias_is_input)) return false;
  auto lowered = [&](const Tensor& t, DType type) {
    if (t.dtype() == type) return t;
    Tensor low = backend::allocate_tensor(t.sizes(), type, t.device(), "linear");
    TG_KERNEL(t.device(), copy)(t, low);
    return low;
  };
  const Tensor a = lowered(a_in, products), b = lowered(b_in, products), bias = lowered(bias_in, out.dtype());
  Problem p;
  p.ab_type = lt_dtype(a.dtype());
  p.d_type = lt_dtype(out.dtype());
  p.compute = a.dtype() == kFloat32 && cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  p.lt_a = *lt_operand(b);
  p.lt_b = *lt_operand(a);
  p.n = a.size(0), p.k = a.size(1), p.m = b.size(1);
  p.epilogue = epilogue;
  p.bias = bias.data_ptr();
  const int device = out.device().index();
  const PlanKey key{device,    p.ab_type, p.d_type,  p.compute,
                    p.lt_a.op, p.lt_b.op, p.m,       p.n,
                    p.k,       p.lt_a.ld, p.lt_b.ld, (int64_t{epilogue} << 16) | alignment_of(p.bias)};
  cublasLtHandle_t handle = lt_handle(device);
  auto found = t_plans.plans.find(key);
  if (found == t_plans.plans.end()) found = t_plans.plans.emplace(key, make_plan(handle, p)).first;
  const Plan& plan = found->second;
  if (!plan.found) return false;
  TG_LT_CHECK(
      cublas_api().lt_matmul_desc_set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  // Bytes as float32 elements: a tensor gives the memory back to the cache when it goes.
  Tensor workspace;
  if (plan.workspace > 0)
    workspace =
        backend::allocate_tensor({static_cast<int64_t>((plan.workspace + 3) / 4)}, kFloat32, out.device(), "linear");
  const float alpha = 1.0f, beta = 0.0f;
  cuda::note_gemm();
  TG_LT_CHECK(cublas_api().lt_matmul(handle, plan.desc, &alpha, b.data_ptr(), plan.a, a.data_ptr(), plan.b, &beta,
                                     out.data_ptr(), plan.d, out.data_ptr(), plan.d, &plan.algo,
                                     workspace.defined() ? workspace.data_ptr() : nullptr, plan.workspace,
                                     current_stream()));
  return true;  // the workspace returns to the cache in stream order, after the product
}

// out = a @ b + bias on every row. Overwrites out.
void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, DType products) {
  TG_ASSERT(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && bias.dim() == 1 && bias.size(0) == out.size(1));
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(out.device());
  if (lt_matmul(a, b, out, bias, products, CUBLASLT_EPILOGUE_BIAS)) return;
  const backend::KernelTable& t = backend::registered_kernels(DeviceKind::CUDA);
  t.copy(bias.expand(out.sizes()), out);
  if (a.dtype() == products && b.dtype() == products && out.dtype() == products)
    t.gemm(a, b, out, 1.0, 1.0);
  else
    t.gemm_mixed(a, b, out, 1.0, 1.0, products);
}

// out = relu(a @ b + bias on every row). Overwrites out.
void gemm_bias_relu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, DType products) {
  TG_ASSERT(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && bias.dim() == 1 && bias.size(0) == out.size(1));
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(out.device());
  if (lt_matmul(a, b, out, bias, products, CUBLASLT_EPILOGUE_RELU_BIAS)) return;
  gemm_bias(a, b, bias, out, products);
  backend::registered_kernels(DeviceKind::CUDA).unary(backend::UnaryOp::Relu, {}, out, out);
}

// out = a @ b and grad_bias = the sums of a's rows. Overwrites both.
void gemm_bias_grad(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& grad_bias, DType products) {
  TG_ASSERT(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && grad_bias.dim() == 1 && grad_bias.size(0) == a.size(0));
  cuda::DeviceGuard guard(out.device());
  if (lt_matmul(a, b, out, grad_bias, products, CUBLASLT_EPILOGUE_BGRADB)) return;
  const backend::KernelTable& t = backend::registered_kernels(DeviceKind::CUDA);
  if (a.dtype() == products && b.dtype() == products && out.dtype() == products)
    t.gemm(a, b, out, 1.0, 0.0);
  else
    t.gemm_mixed(a, b, out, 1.0, 0.0, products);
  // The row sums as a @ ones [k, 1], in a's own precision (into a float32 grad_bias for 16-bit a).
  if (grad_bias.numel() == 0) return;
  Tensor ones = backend::allocate_tensor({a.size(1), 1}, a.dtype(), a.device(), "linear");
  if (a.size(1) > 0) t.fill(ones, 1.0);
  const Tensor sums = grad_bias.view({grad_bias.size(0), 1});
  if (grad_bias.dtype() == a.dtype())
    t.gemm(a, ones, sums, 1.0, 0.0);
  else
    t.gemm_mixed(a, ones, sums, 1.0, 0.0, a.dtype());
}

}  // namespace

void register_blas_lt(backend::KernelTable& table) {
  table.gemm_bias = gemm_bias;
  table.gemm_bias_relu = gemm_bias_relu;
  table.gemm_bias_grad = gemm_bias_grad;
}

}  // namespace tapegrad::cuda_backend
