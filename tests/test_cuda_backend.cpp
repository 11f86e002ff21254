// The CUDA backend as far as it exists: device queries everywhere, and memory, copies and fill
// on a GPU. The GPU cases skip (and ctest counts them as skipped) where no GPU is present.
#include "backend/cudnn_lstm.h"
#include "backend/kernel_table.h"
#include "test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"

TEST(CudaQueries, AnswerWithoutFailing) {
  int count = cuda::device_count();
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda::is_available(), count > 0);
}

TEST(CudaQueries, NoGpuMeansAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  expect_error([] { zeros({2}, kCUDA); }, {"cuda"});
}

TEST(CudaBackend, RoundTripKeepsValues) {
  SKIP_WITHOUT_GPU();
  Tensor host = tensor<float>({1.5f, -2.0f, 3.25f, 0.0f}, {2, 2});
  Tensor device = host.to(kCUDA);
  EXPECT_TRUE(device.device().is_cuda());
  EXPECT_EQ(device.sizes(), host.sizes());
  EXPECT_EQ(device.cpu().tolist<float>(), host.tolist<float>());
}

TEST(CudaBackend, FillAndZeros) {
  SKIP_WITHOUT_GPU();
  Tensor t = full({3, 5}, 2.5, TensorOptions(kFloat64).device(kCUDA));
  for (double v : t.cpu().tolist<double>()) EXPECT_EQ(v, 2.5);
  Tensor z = zeros({1000}, TensorOptions(kInt64).device(kCUDA));
  for (int64_t v : z.cpu().tolist<int64_t>()) EXPECT_EQ(v, 0);
}

TEST(CudaBackend, DeviceCopyAndClone) {
  SKIP_WITHOUT_GPU();
  Tensor a = arange(0, 10, 1, TensorOptions(kFloat32)).to(kCUDA);
  Tensor b = a.clone();
  EXPECT_EQ(b.cpu().tolist<float>(), a.cpu().tolist<float>());
}

// Every slot of a backend's table, so a new slot cannot be forgotten by one backend silently.
std::vector<std::pair<const char*, bool>> filled_slots(const backend::KernelTable& t) {
  return {{"allocator", t.allocator != nullptr},
          {"copy", t.copy != nullptr},
          {"copy_from_cpu", t.copy_from_cpu != nullptr},
          {"copy_to_cpu", t.copy_to_cpu != nullptr},
          {"fill", t.fill != nullptr},
          {"arange", t.arange != nullptr},
          {"uniform", t.uniform != nullptr},
          {"normal", t.normal != nullptr},
          {"randint", t.randint != nullptr},
          {"unary", t.unary != nullptr},
          {"unary_backward", t.unary_backward != nullptr},
          {"binary", t.binary != nullptr},
          {"compare", t.compare != nullptr},
          {"where", t.where != nullptr},
          {"clamp", t.clamp != nullptr},
          {"reduce", t.reduce != nullptr},
          {"reduce_with_index", t.reduce_with_index != nullptr},
          {"gemm", t.gemm != nullptr},
          {"bmm", t.bmm != nullptr},
          {"softmax", t.softmax != nullptr},
          {"softmax_backward", t.softmax_backward != nullptr},
          {"cross_entropy", t.cross_entropy != nullptr},
          {"cross_entropy_backward", t.cross_entropy_backward != nullptr},
          {"index_select", t.index_select != nullptr},
          {"index_add", t.index_add != nullptr},
          {"gather", t.gather != nullptr},
          {"scatter_add", t.scatter_add != nullptr},
          {"lstm_cell_forward", t.lstm_cell_forward != nullptr},
          {"lstm_cell_backward", t.lstm_cell_backward != nullptr},
          {"sgd_step", t.sgd_step != nullptr},
          {"adam_step", t.adam_step != nullptr},
          {"sgd_step_many", t.sgd_step_many != nullptr},
          {"adam_step_many", t.adam_step_many != nullptr}};
}

TEST(KernelTables, CpuFillsEverySlot) {
  for (auto [slot, filled] : filled_slots(backend::kernels(DeviceKind::CPU))) {
    const std::string name = slot;
    if (name == "copy_from_cpu" || name == "copy_to_cpu") continue;  // the CPU's own copy covers these
    EXPECT_TRUE(filled) << slot;
  }
  // Optional slots the CPU fills: the batch-parallel LSTM recurrence.
  EXPECT_NE(backend::kernels(DeviceKind::CPU).lstm_recurrence_forward, nullptr);
  EXPECT_NE(backend::kernels(DeviceKind::CPU).lstm_recurrence_backward, nullptr);
}

TEST(KernelTables, CudaFillsEverySlotWhereAGpuIsPresent) {
  SKIP_WITHOUT_GPU();
  const backend::KernelTable& t = backend::kernels(DeviceKind::CUDA);
  for (auto [slot, filled] : filled_slots(t)) EXPECT_TRUE(filled) << slot;
  if (testing::cuda_is_emulated()) return;  // cuDNN is not emulated: its slot stays empty
  EXPECT_NE(t.cudnn_lstm, nullptr);
}

TEST(KernelTables, AnEmptySlotIsAnErrorNamingKernelAndDevice) {
  // cuDNN's LSTM exists only on CUDA: the CPU slot is empty by design.
  expect_error([] { (void)TG_KERNEL(kCPU, cudnn_lstm); }, {"no cpu kernel for cudnn_lstm"});
}

}  // namespace
}  // namespace tapegrad
