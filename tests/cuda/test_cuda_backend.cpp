// The CUDA backend as far as it exists: device queries everywhere, and memory, copies and fill
// on a GPU. The GPU cases skip (and ctest counts them as skipped) where no GPU is present.
#include <set>
#include <string>
#include <vector>

#include "backend/cudnn_lstm.h"
#include "backend/kernel_table.h"
#include "support/gpu.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_error;

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

// The slot list comes from backend/kernel_slots.def, where each slot is defined, so a new slot
// cannot be forgotten by one backend silently.
TEST(KernelTables, TheSlotListIsTheWholeTable) {
  const std::vector<backend::SlotStatus> slots = backend::slot_status(backend::kernels(DeviceKind::CPU));
  // Every slot is one pointer: a member of KernelTable outside the list would break this.
  EXPECT_EQ(slots.size() * sizeof(void*), sizeof(backend::KernelTable));
  std::set<std::string> names;
  for (const backend::SlotStatus& s : slots) names.insert(s.name);
  EXPECT_EQ(names.size(), slots.size()) << "a slot listed twice";
  for (const char* known : {"allocator", "unary", "lstm_recurrence_backward", "adam_step_many", "cudnn_lstm"})
    EXPECT_EQ(names.count(known), 1u) << known;
}

TEST(KernelTables, CpuFillsEverySlot) {
  for (const backend::SlotStatus& s : backend::slot_status(backend::kernels(DeviceKind::CPU)))
    if (s.fill == backend::SlotFill::EveryBackend) EXPECT_TRUE(s.filled) << s.name;
  // Optional slots the CPU fills: the batch-parallel LSTM recurrence.
  EXPECT_NE(backend::kernels(DeviceKind::CPU).lstm_recurrence_forward, nullptr);
  EXPECT_NE(backend::kernels(DeviceKind::CPU).lstm_recurrence_backward, nullptr);
}

// Negative control: the check above must see an emptied slot.
TEST(KernelTables, AnEmptiedSlotIsReportedByName) {
  backend::KernelTable copy = backend::kernels(DeviceKind::CPU);
  copy.clamp = nullptr;
  int empty = 0;
  for (const backend::SlotStatus& s : backend::slot_status(copy)) {
    if (s.fill != backend::SlotFill::EveryBackend || s.filled) continue;
    ++empty;
    EXPECT_STREQ(s.name, "clamp");
  }
  EXPECT_EQ(empty, 1);
}

TEST(KernelTables, CudaFillsEverySlotWhereAGpuIsPresent) {
  SKIP_WITHOUT_GPU();
  const backend::KernelTable& t = backend::kernels(DeviceKind::CUDA);
  for (const backend::SlotStatus& s : backend::slot_status(t))
    if (s.fill != backend::SlotFill::Optional) EXPECT_TRUE(s.filled) << s.name;
  if (testing::cuda_is_emulated()) return;  // cuDNN is not emulated: its slot stays empty
  EXPECT_NE(t.cudnn_lstm, nullptr);
}

TEST(KernelTables, AnEmptySlotIsAnErrorNamingKernelAndDevice) {
  // cuDNN's LSTM exists only on CUDA: the CPU slot is empty by design.
  expect_error([] { (void)TG_KERNEL(kCPU, cudnn_lstm); }, {"no cpu kernel for cudnn_lstm"});
}

}  // namespace
}  // namespace tapegrad
