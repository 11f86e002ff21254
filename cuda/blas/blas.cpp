// gemm and bmm through cuBLAS: f32, f16 and bf16 with f32 accumulation (TF32 only when
// tapegrad::cuda::allow_tf32() is on), f64 through cublasDgemm.
//
// Note [row-major products on a column-major library]: a row-major matrix with strides (ld, 1) is,
// read column-major with leading dimension ld, its own transpose. So out = a @ b is computed as
// out^T = b^T a^T, with out's memory as the column-major result: an operand with unit column
// stride is passed untransposed (CUBLAS_OP_N, ld = its row stride), one with unit row stride
// transposed (CUBLAS_OP_T, ld = its column stride), and anything else is first copied to
// contiguous on the device. An output with unit row stride is handled as out^T = b^T a^T (operands
// swapped); any other output layout goes through a contiguous temporary.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/kernel_tensors.h"
#include "blas/cublas_handle.h"
#include "blas/cublas_loader.h"
#include "register.h"
#include "tapegrad/cuda/blas_settings.h"
#include "tapegrad/cuda/counters.h"
#include "tapegrad/cuda/device.h"

namespace tapegrad::cuda_backend {

namespace {

// A matrix (or a batch of them) as cuBLAS reads it.
struct Operand {
  Tensor tensor;  // the memory cuBLAS reads: the caller's tensor or a contiguous copy
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t lead = 1;
  int64_t batch_stride = 0;  // 0 reuses one matrix for every batch (a broadcast operand)
};

// `m` is [rows, cols] or [batch, rows, cols]. The stride conditions are those of the CPU gemm
// (src/cpu/gemm/gemm.cpp), so both backends accept the same layouts without copying.
Operand as_operand(const Tensor& m) {
  const int64_t rows = m.size(-2), cols = m.size(-1), s_row = m.stride(-2), s_col = m.stride(-1);
  const int64_t batch_stride = m.dim() == 3 ? m.stride(0) : 0;
  if (s_col == 1 && (s_row >= std::max<int64_t>(1, cols) || rows == 1))
    return {m, CUBLAS_OP_N, std::max<int64_t>({s_row, cols, 1}), batch_stride};
  if (s_row == 1 && (s_col >= std::max<int64_t>(1, rows) || cols == 1))
    return {m, CUBLAS_OP_T, std::max<int64_t>({s_col, rows, 1}), batch_stride};
  // A broadcast batch needs only its one matrix copied.
  const bool broadcast = m.dim() == 3 && batch_stride == 0;
  Tensor c = backend::contiguous_copy(broadcast ? m.select(0, 0) : m, "matmul");
  return {c, CUBLAS_OP_N, std::max<int64_t>(cols, 1), m.dim() == 3 && !broadcast ? rows * cols : 0};
}

// Whether `out` ([.., n, m]) can be cuBLAS's column-major C as it is: unit column stride.
bool usable_as_output(const Tensor& out) {
  const int64_t rows = out.size(-2), cols = out.size(-1), s_row = out.stride(-2), s_col = out.stride(-1);
  return (s_col == 1 || cols == 1) && (s_row >= std::max<int64_t>(1, cols) || rows == 1);
}

struct GemmArgs {
  Operand a, b;
  Tensor out;
  int64_t n, m, k, batch;
  double alpha, beta;
  const char* op;  // for error messages
};

cudaDataType cuda_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    default:
      TG_ASSERT(false, "no cuBLAS type for ", dtype);
  }
  return CUDA_R_32F;
}

// out^T [m, n] = op(b) [m, k] * op(a) [k, n] in column-major terms (see the note above).
void call_cublas(const GemmArgs& g) {
  const char* where = g.op;
  const DType dtype = g.out.dtype();
  const int64_t ldc = std::max<int64_t>({g.out.stride(-2), g.m, 1});
  const int64_t stride_c = g.out.dim() == 3 ? g.out.stride(0) : 0;
  cublasHandle_t handle = cublas_handle();
  if (dtype == DType::Float64) {
    cuda::note_gemm();
    const double alpha = g.alpha, beta = g.beta;
    const auto* b = static_cast<const double*>(g.b.tensor.data_ptr());
    const auto* a = static_cast<const double*>(g.a.tensor.data_ptr());
    auto* c = static_cast<double*>(g.out.data_ptr());
    if (g.batch == 1) {
      TG_CUBLAS_CHECK(
          cublas_api().dgemm(handle, g.b.op, g.a.op, g.m, g.n, g.k, &alpha, b, g.b.lead, a, g.a.lead, &beta, c, ldc),
          where);
    } else {
      TG_CUBLAS_CHECK(cublas_api().dgemm_strided_batched(handle, g.b.op, g.a.op, g.m, g.n, g.k, &alpha, b, g.b.lead,
                                                         g.b.batch_stride, a, g.a.lead, g.a.batch_stride, &beta, c, ldc,
                                                         stride_c, g.batch),
                      where);
    }
    return;
  }
  TG_CHECK(dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16, where,
           ": the cuda backend multiplies float32, float64, float16 and bfloat16 matrices, got ", dtype);
  // A and B may be 16-bit with a float32 C (mixed precision's products, gemm_mixed).
  const DType operands = g.a.tensor.dtype();
  TG_ASSERT(operands == g.b.tensor.dtype() && (operands == dtype || dtype == DType::Float32));
  // The 16-bit types accumulate in f32 too; TF32 rounding applies only to f32 inputs, and only on request.
  const cublasComputeType_t compute =
      operands == DType::Float32 && cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType type = cuda_dtype(operands), c_type = cuda_dtype(dtype);
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  cuda::note_gemm();
  if (g.batch == 1) {
    TG_CUBLAS_CHECK(cublas_api().gemm_ex(handle, g.b.op, g.a.op, g.m, g.n, g.k, &alpha, g.b.tensor.data_ptr(), type,
                                         g.b.lead, g.a.tensor.data_ptr(), type, g.a.lead, &beta, g.out.data_ptr(),
                                         c_type, ldc, compute, CUBLAS_GEMM_DEFAULT),
                    where);
  } else {
    TG_CUBLAS_CHECK(cublas_api().gemm_strided_batched_ex(
                        handle, g.b.op, g.a.op, g.m, g.n, g.k, &alpha, g.b.tensor.data_ptr(), type, g.b.lead,
                        g.b.batch_stride, g.a.tensor.data_ptr(), type, g.a.lead, g.a.batch_stride, &beta,
                        g.out.data_ptr(), c_type, ldc, stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT),
                    where);
  }
}

// out <- beta * out: the whole product when the inner dimension is empty.
void scale_output(const Tensor& out, double beta) {
  const Device device = out.device();
  if (beta == 1.0) return;
  if (beta == 0.0) {
    TG_KERNEL(device, fill)(out, 0.0);
    return;
  }
  Tensor factor = backend::allocate_tensor({}, out.dtype(), device, "matmul");
  TG_KERNEL(device, fill)(factor, beta);
  TG_KERNEL(device, binary)(backend::BinaryOp::Mul, out, factor.expand(out.sizes()), out);
}

// out = alpha * a @ b + beta * out for 2-D or 3-D (batched) tensors of one dtype.
void matmul_into(const Tensor& a_in, const Tensor& b_in, const Tensor& out_in, double alpha, double beta,
                 const char* op) {
  Tensor a = a_in.detach(), b = b_in.detach(), out = out_in.detach();
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  if (batch == 0 || n == 0 || m == 0) return;
  TG_ASSERT(batch == 1 || out.stride(0) != 0, "gemm: a broadcast output would be written by every batch");
  if (k == 0) {
    scale_output(out, beta);
    return;
  }
  if (!usable_as_output(out)) {
    // A column-major output is a row-major out^T = b^T a^T.
    Tensor out_t = out.transpose(-2, -1);
    if (usable_as_output(out_t)) {
      matmul_into(b.transpose(-2, -1), a.transpose(-2, -1), out_t, alpha, beta, op);
      return;
    }
    Tensor tmp = beta == 0.0 ? backend::allocate_tensor(out.sizes(), out.dtype(), out.device(), "matmul")
                             : backend::contiguous_copy(out, "matmul");
    matmul_into(a, b, tmp, alpha, beta, op);
    TG_KERNEL(out.device(), copy)(tmp, out);
    return;
  }
  call_cublas({as_operand(a), as_operand(b), out, n, m, k, batch, alpha, beta, op});
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  TG_ASSERT(a.dim() == 2 && b.dim() == 2 && out.dim() == 2);
  cuda::DeviceGuard guard(out.device());  // the handle, workspace and stream are the tensors' device's
  matmul_into(a, b, out, alpha, beta, "mm");
}

void bmm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  TG_ASSERT(a.dim() == 3 && b.dim() == 3 && out.dim() == 3);
  cuda::DeviceGuard guard(out.device());
  matmul_into(a, b, out, alpha, beta, "bmm");
}

// out (float32) = alpha * a @ b + beta * out with a and b converted to `products` on the device
// first: one cuBLAS GEMM of 16-bit operands with f32 accumulation into an f32 C (tensor cores).
void gemm_mixed(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta, DType products) {
  TG_ASSERT(a.dim() == 2 && b.dim() == 2 && out.dim() == 2);
  TG_CHECK(products == DType::BFloat16 || products == DType::Float16,
           "mm: cuda's mixed-precision products are bfloat16 or float16, got ", products);
  TG_CHECK(out.dtype() == DType::Float32 || out.dtype() == products, "mm: mixed-precision products write float32 or ",
           products, ", got ", out.dtype());
  cuda::DeviceGuard guard(out.device());
  // Operands already of the low type (autocast's outputs) are used as they are.
  auto lowered = [&](const Tensor& t) {
    if (t.dtype() == products) return t;
    Tensor low = backend::allocate_tensor(t.sizes(), products, t.device(), "mm");
    if (low.numel() > 0) TG_KERNEL(t.device(), copy)(t.detach(), low);
    return low;
  };
  matmul_into(lowered(a), lowered(b), out, alpha, beta, "mm");
}

}  // namespace

void register_blas(backend::KernelTable& table) {
  table.gemm = gemm;
  table.gemm_mixed = gemm_mixed;
  table.bmm = bmm;
}

}  // namespace tapegrad::cuda_backend
