// linear on CUDA through the gemm_bias / gemm_bias_grad slots (cuBLASLt's BIAS and BGRADB
// epilogues): output and every gradient against an f64 CPU reference, with and without bias, odd
// shapes, transposed, strided, misaligned, broadcast and unit-dimension inputs (the last ones fall
// back to the plain path), f16/bf16 tensors, autocast and TF32 against the same op with the slots
// emptied. In the emulation build the emulated cuBLASLt counts its epilogue calls, which shows
// that the fused path ran where it should and only there; and its own checks get planted bugs.
// Skips where no GPU is present.
#include <functional>
#include <optional>
#include <string>

#include "backend/kernel_table.h"
#include "support/gpu.h"
#include "support/parity.h"
#include "support/random_values.h"
#include "support/test_util.h"
#include "tapegrad/amp/autocast.h"

#if defined(TAPEGRAD_TEST_CUDA_EMULATOR)
#include <cublasLt.h>

#include "cuda_emulator/cublaslt_control.h"
#endif

namespace tapegrad {
namespace {

using testing::Tol;

Tensor uniform_cpu(const Shape& shape, uint64_t seed) {
  return testing::uniform(shape, kFloat64, seed);
}

// Epilogue calls the emulated cuBLASLt has run (BIAS: forward, BGRADB: backward); -1 on a GPU.
struct EpilogueCounts {
  int64_t bias = -1, bias_grad = -1;
};
EpilogueCounts epilogue_counts() {
#if defined(TAPEGRAD_TEST_CUDA_EMULATOR)
  return {tapegrad_emu::cublaslt_matmul_count(CUBLASLT_EPILOGUE_BIAS),
          tapegrad_emu::cublaslt_matmul_count(CUBLASLT_EPILOGUE_BGRADB)};
#else
  return {};
#endif
}
bool counts_available() {
  return epilogue_counts().bias >= 0;
}

// Empties the CUDA table's gemm_bias slots for a scope, so linear takes the plain path.
struct WithoutEpilogueSlots {
  WithoutEpilogueSlots() : table(backend::mutable_kernels(DeviceKind::CUDA)) {
    saved_bias = table.gemm_bias;
    saved_grad = table.gemm_bias_grad;
    table.gemm_bias = nullptr;
    table.gemm_bias_grad = nullptr;
  }
  ~WithoutEpilogueSlots() {
    table.gemm_bias = saved_bias;
    table.gemm_bias_grad = saved_grad;
  }
  backend::KernelTable& table;
  decltype(backend::KernelTable::gemm_bias) saved_bias;
  decltype(backend::KernelTable::gemm_bias_grad) saved_grad;
};

struct Tf32Guard {
  explicit Tf32Guard(bool allow) : previous(cuda::allow_tf32()) { cuda::set_allow_tf32(allow); }
  ~Tf32Guard() { cuda::set_allow_tf32(previous); }
  bool previous;
};

struct Grads {
  Tensor out, dx, dw, db;
};

// One forward and backward of linear on (x, w, b) as given (leaves are made here), with a loss that
// weighs each output element differently so that every gradient is non-trivial.
Grads run_linear(Tensor x, Tensor w, Tensor b, const std::function<Tensor(const Tensor&)>& view_x = nullptr) {
  x.requires_grad_(true);
  w.requires_grad_(true);
  if (b.defined()) b.requires_grad_(true);
  Tensor input = view_x ? view_x(x) : x;
  Tensor out = linear(input, w, b);
  Tensor weights = uniform_cpu(out.sizes(), 99).to(out.dtype()).to(out.device());
  sum(mul(out, weights)).backward();
  return {out.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

void expect_grads(const Grads& got, const Grads& want, Tol tol, const std::string& what) {
  testing::expect_allclose(got.out, want.out, tol, what + " output");
  testing::expect_allclose(got.dx, want.dx, tol, what + " grad x");
  testing::expect_allclose(got.dw, want.dw, tol, what + " grad weight");
  testing::expect_allclose(got.db, want.db, tol, what + " grad bias");
}

struct Shape3 {
  int64_t n, in, out;
};

// Values and gradients on CUDA (f32) against the CPU in f64; the epilogues ran once per pass.
void check_against_cpu(Shape3 s, bool with_bias, bool expect_fused, const std::string& what,
                       const std::function<Tensor(const Tensor&)>& view_x = nullptr, Shape x_shape = {}) {
  if (x_shape.empty()) x_shape = {s.n, s.in};
  Tensor x = uniform_cpu(x_shape, 1), w = uniform_cpu({s.out, s.in}, 2);
  Tensor b = with_bias ? uniform_cpu({s.out}, 3) : Tensor();
  const Grads want = run_linear(x.clone(), w.clone(), b.defined() ? b.clone() : Tensor(), view_x);
  const EpilogueCounts before = epilogue_counts();
  const Grads got = run_linear(x.to(kFloat32).to(kCUDA), w.to(kFloat32).to(kCUDA),
                               b.defined() ? b.to(kFloat32).to(kCUDA) : Tensor(), view_x);
  const EpilogueCounts after = epilogue_counts();
  const double k = static_cast<double>(std::max(s.in, s.n));
  expect_grads(got, want, {1e-5, 1e-5 + 2e-6 * k}, what);
  if (!counts_available()) return;
  const int64_t fused = with_bias && expect_fused ? 1 : 0;
  EXPECT_EQ(after.bias - before.bias, fused) << what << ": forward epilogue calls";
  EXPECT_EQ(after.bias_grad - before.bias_grad, fused) << what << ": backward epilogue calls";
}

TEST(CudaLinearEpilogues, MatchesTheCpuWithAndWithoutBias) {
  SKIP_WITHOUT_GPU();
  // Odd sizes, a long inner dimension each way (the emulated heuristic then asks for a workspace).
  for (Shape3 s : {Shape3{2, 2, 2}, Shape3{5, 7, 3}, Shape3{17, 33, 9}, Shape3{64, 128, 32}, Shape3{3, 300, 5},
                   Shape3{300, 4, 6}}) {
    const std::string what = std::to_string(s.n) + "x" + std::to_string(s.in) + "->" + std::to_string(s.out);
    check_against_cpu(s, true, true, what + " with bias");
    check_against_cpu(s, false, false, what + " without bias");
  }
}

// linear_relu without a tape: one product with the RELU_BIAS epilogue where the fused form applies
// (n, m, k >= 2), the plain product and an in-place clamp elsewhere; both against the CPU's
// relu(linear) in f64 (values in [-1, 1]: about half of the outputs are clamped).
TEST(CudaLinearEpilogues, LinearReluUsesTheReluBiasEpilogue) {
  SKIP_WITHOUT_GPU();
  for (Shape3 s : {Shape3{1, 7, 5}, Shape3{5, 7, 3}, Shape3{64, 128, 32}}) {
    const std::string what = std::to_string(s.n) + "x" + std::to_string(s.in) + "->" + std::to_string(s.out);
    Tensor x = uniform_cpu({s.n, s.in}, 1), w = uniform_cpu({s.out, s.in}, 2), b = uniform_cpu({s.out}, 3);
    const Tensor want = relu(linear(x, w, b));
#if defined(TAPEGRAD_TEST_CUDA_EMULATOR)
    const int64_t before = tapegrad_emu::cublaslt_matmul_count(CUBLASLT_EPILOGUE_RELU_BIAS);
#endif
    Tensor got;
    {
      InferenceMode guard;
      got = linear_relu(x.to(kFloat32).to(kCUDA), w.to(kFloat32).to(kCUDA), b.to(kFloat32).to(kCUDA));
    }
    testing::expect_allclose(got, want, {1e-5, 1e-5 + 2e-6 * s.in}, what);
#if defined(TAPEGRAD_TEST_CUDA_EMULATOR)
    EXPECT_EQ(tapegrad_emu::cublaslt_matmul_count(CUBLASLT_EPILOGUE_RELU_BIAS) - before, s.n >= 2 ? 1 : 0) << what;
#endif
  }
}

TEST(CudaLinearEpilogues, TransposedAndPaddedInputsRunFused) {
  SKIP_WITHOUT_GPU();
  // x^T stored contiguously: unit row stride, read transposed without a copy.
  check_against_cpu({6, 5, 4}, true, true, "transposed x", [](const Tensor& x) { return x.t(); }, {5, 6});
  // Rows padded to 8 elements: a leading dimension larger than the row, at an aligned start.
  check_against_cpu({6, 5, 4}, true, true, "padded rows", [](const Tensor& x) { return x.narrow(1, 0, 5); }, {6, 8});
  // Leading dims folded into rows by linear itself.
  check_against_cpu({12, 5, 3}, true, true, "3-D input", [](const Tensor& x) { return x.reshape({3, 4, 5}); });
}

TEST(CudaLinearEpilogues, LayoutsItCannotTakeFallBackCorrectly) {
  SKIP_WITHOUT_GPU();
  // A start 4 bytes past an aligned address: cuBLASLt's algorithms are chosen for 16-byte alignment.
  check_against_cpu({6, 5, 4}, true, false, "misaligned x", [](const Tensor& x) { return x.narrow(1, 1, 5); }, {6, 6});
  // Every row the same memory (stride 0): no cuBLASLt layout reads it without a copy.
  check_against_cpu({6, 5, 4}, true, false, "broadcast x", [](const Tensor& x) { return x.expand({6, 5}); }, {1, 5});
  // Unit dimensions: batch 1, one feature in, one feature out.
  check_against_cpu({1, 5, 4}, true, false, "batch 1");
  check_against_cpu({6, 1, 4}, true, false, "one input feature");
  check_against_cpu({6, 5, 1}, true, false, "one output feature");
  check_against_cpu({0, 5, 4}, true, false, "empty batch");
}

TEST(CudaLinearEpilogues, Float64TakesThePlainPath) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform_cpu({6, 5}, 1), w = uniform_cpu({4, 5}, 2), b = uniform_cpu({4}, 3);
  const Grads want = run_linear(x.clone(), w.clone(), b.clone());
  const EpilogueCounts before = epilogue_counts();
  const Grads got = run_linear(x.to(kCUDA), w.to(kCUDA), b.to(kCUDA));
  const EpilogueCounts after = epilogue_counts();
  expect_grads(got, want, {1e-12, 1e-12}, "f64");
  EXPECT_EQ(after.bias, before.bias);
  EXPECT_EQ(after.bias_grad, before.bias_grad);
}

// The fused path against the same op with the slots emptied, on the same device and inputs.
void check_against_plain(DType dtype, bool autocast, DType products, bool tf32, Tol tol, const std::string& what) {
  Tensor x = uniform_cpu({9, 24}, 1), w = uniform_cpu({12, 24}, 2), b = uniform_cpu({12}, 3);
  auto on_device = [&](const Tensor& t) { return t.to(dtype).to(kCUDA); };
  const Tf32Guard allow(tf32);
  auto run = [&] {
    std::optional<amp::AutocastGuard> guard;
    if (autocast) guard.emplace(kCUDA, products);
    return run_linear(on_device(x), on_device(w), on_device(b));
  };
  Grads plain;
  {
    WithoutEpilogueSlots without;
    plain = run();
  }
  const EpilogueCounts before = epilogue_counts();
  const Grads fused = run();
  const EpilogueCounts after = epilogue_counts();
  expect_grads(fused, plain, tol, what);
  ASSERT_EQ(fused.out.dtype(), autocast ? products : dtype) << what;  // autocast returns the low type
  if (!counts_available()) return;
  EXPECT_EQ(after.bias - before.bias, 1) << what;
  EXPECT_EQ(after.bias_grad - before.bias_grad, 1) << what;
}

TEST(CudaLinearEpilogues, SixteenBitTensorsAutocastAndTf32MatchThePlainPath) {
  SKIP_WITHOUT_GPU();
  // Only the summation order differs from the plain path (and, for 16-bit outputs, one rounding).
  check_against_plain(kBFloat16, false, kBFloat16, false, {2e-2, 2e-2}, "bf16 tensors");
  check_against_plain(kFloat16, false, kFloat16, false, {2e-3, 2e-3}, "f16 tensors");
  // Under autocast the fused bias gradient sums the bf16-rounded gradient, as PyTorch's autocast
  // does; the plain path sums it in f32.
  check_against_plain(kFloat32, true, kBFloat16, false, {1e-2, 1e-2}, "autocast bf16");
  check_against_plain(kFloat32, true, kFloat16, false, {2e-3, 2e-3}, "autocast f16");
  // With TF32 the plain path's bias gradient (a ones-vector GEMM) rounds g to TF32 too; BGRADB's
  // sum does not. That TF32 reaches the fused product is the next test's business.
  check_against_plain(kFloat32, false, kFloat32, true, {2e-3, 2e-3}, "tf32");
}

// Negative control for the TF32 comparison above: TF32 products really differ from f32 ones.
TEST(CudaLinearEpilogues, Tf32ChangesTheFusedResult) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform_cpu({9, 24}, 1).to(kFloat32).to(kCUDA), w = uniform_cpu({12, 24}, 2).to(kFloat32).to(kCUDA);
  Tensor b = uniform_cpu({12}, 3).to(kFloat32).to(kCUDA);
  Tensor exact, rounded;
  {
    const Tf32Guard off(false);
    exact = linear(x, w, b);
  }
  {
    const Tf32Guard on(true);
    rounded = linear(x, w, b);
  }
  const double diff = max(abs(sub(exact, rounded))).item<double>();
  EXPECT_GT(diff, 1e-6);
  EXPECT_LT(diff, 5e-2);
}

TEST(CudaLinearEpilogues, OnlyTheBiasGradientNeededKeepsThePlainColumnSum) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform_cpu({6, 5}, 1), w = uniform_cpu({4, 5}, 2), b = uniform_cpu({4}, 3);
  Tensor xg = x.to(kFloat32).to(kCUDA), wg = w.to(kFloat32).to(kCUDA), bg = b.to(kFloat32).to(kCUDA);
  bg.requires_grad_(true);
  const EpilogueCounts before = epilogue_counts();
  sum(linear(xg, wg, bg)).backward();  // neither x nor w needs a gradient: no dW GEMM to fuse into
  const EpilogueCounts after = epilogue_counts();
  testing::expect_allclose(bg.grad(), full({4}, 6.0, kFloat32), {0, 1e-6}, "grad bias");
  if (!counts_available()) return;
  EXPECT_EQ(after.bias - before.bias, 1);
  EXPECT_EQ(after.bias_grad, before.bias_grad);
}

#if defined(TAPEGRAD_TEST_CUDA_EMULATOR)

// The emulated cuBLASLt's own checks, each against a planted mistake a caller could make.
class EmulatedCublasLt : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    a = empty({64 + 16}, TensorOptions(kFloat32).device(kCUDA));  // room for a misaligned start
    b = empty({64}, TensorOptions(kFloat32).device(kCUDA));
    d = empty({64}, TensorOptions(kFloat32).device(kCUDA));
    bias = empty({8}, TensorOptions(kFloat32).device(kCUDA));
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    for (cublasLtMatrixLayout_t* l : {&la, &lb, &ld})
      ASSERT_EQ(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle == nullptr) return;
    cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  void set_epilogue(cublasLtEpilogue_t e, const void* bias_ptr) {
    const uint32_t value = e;
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &value, sizeof(value)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t heuristic(cublasLtMatmulAlgo_t* algo) {
    cublasLtMatmulHeuristicResult_t r{};
    int returned = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, 1, &r, &returned);
    *algo = r.algo;
    return s;
  }
  cublasStatus_t matmul(const void* a_ptr, const cublasLtMatmulAlgo_t& algo) {
    const float alpha = 1, beta = 0;
    return cublasLtMatmul(handle, desc, &alpha, a_ptr, la, b.data_ptr(), lb, &beta, d.data_ptr(), ld, d.data_ptr(), ld,
                          &algo, nullptr, 0, nullptr);
  }

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Tensor a, b, d, bias;
};

TEST_F(EmulatedCublasLt, AWellFormedCallRuns) {
  set_epilogue(CUBLASLT_EPILOGUE_BIAS, bias.data_ptr());
  cublasLtMatmulAlgo_t algo;
  ASSERT_EQ(heuristic(&algo), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul(a.data_ptr(), algo), CUBLAS_STATUS_SUCCESS);
  cuda::synchronize();
}

TEST_F(EmulatedCublasLt, ABiasEpilogueWithoutABiasPointerIsRejected) {
  set_epilogue(CUBLASLT_EPILOGUE_BGRADB, nullptr);
  cublasLtMatmulAlgo_t algo;
  EXPECT_EQ(heuristic(&algo), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(EmulatedCublasLt, AnAlgorithmChosenForAnotherProblemIsRejected) {
  set_epilogue(CUBLASLT_EPILOGUE_DEFAULT, nullptr);
  cublasLtMatmulAlgo_t algo;
  ASSERT_EQ(heuristic(&algo), CUBLAS_STATUS_SUCCESS);
  set_epilogue(CUBLASLT_EPILOGUE_BIAS, bias.data_ptr());  // the plan changed after the heuristic
  EXPECT_EQ(matmul(a.data_ptr(), algo), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(EmulatedCublasLt, APointerLessAlignedThanTheAlgorithmIsRejected) {
  set_epilogue(CUBLASLT_EPILOGUE_DEFAULT, nullptr);
  cublasLtMatmulAlgo_t algo;
  ASSERT_EQ(heuristic(&algo), CUBLAS_STATUS_SUCCESS);  // default preference: 256-byte alignment
  const void* shifted = static_cast<const char*>(a.data_ptr()) + 16;
  EXPECT_EQ(matmul(shifted, algo), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(EmulatedCublasLt, LayoutsThatDoNotFitTheProductAreRejected) {
  set_epilogue(CUBLASLT_EPILOGUE_DEFAULT, nullptr);
  const uint64_t rows = 4;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows)),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulAlgo_t algo;
  EXPECT_EQ(heuristic(&algo), CUBLAS_STATUS_INVALID_VALUE);
  const int32_t wrong_size = 0;  // an attribute buffer of the wrong size
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ROWS, &wrong_size, sizeof(wrong_size)),
            CUBLAS_STATUS_INVALID_VALUE);
}

#endif  // TAPEGRAD_TEST_CUDA_EMULATOR

}  // namespace
}  // namespace tapegrad
