// The CUDA backend as far as it exists: device queries everywhere, and memory, copies and fill
// on a GPU. The GPU cases skip (and ctest counts them as skipped) where no GPU is present.
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

TEST(CudaBackend, MissingKernelIsAnError) {
  SKIP_WITHOUT_GPU();
  Tensor a = ones({4}, kCUDA);
  expect_error([&] { softmax(a, 0); }, {"no cuda kernel for softmax"});
}

}  // namespace
}  // namespace tapegrad
