// Core tensor semantics: devices, dtypes, factories, geometry, views, conversions, copies and printing.
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/test_util.h"
#include "support/thread_count.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::values;

bool same_storage(const Tensor& a, const Tensor& b) {
  return a.storage().get() == b.storage().get();
}

std::vector<int64_t> ints(const Tensor& t) {
  return t.to(kInt64).tolist<int64_t>();
}

// ---------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------

TEST(Device, ParsesCpu) {
  Device d("cpu");
  EXPECT_EQ(d.kind(), DeviceKind::CPU);
  EXPECT_EQ(d.index(), 0);
  EXPECT_TRUE(d.is_cpu());
  EXPECT_FALSE(d.is_cuda());
  EXPECT_EQ(d.str(), "cpu");
  EXPECT_EQ(Device("cpu:0"), kCPU);
  EXPECT_EQ(Device(), kCPU);
}

TEST(Device, ParsesCudaWithAndWithoutIndex) {
  Device plain("cuda");
  EXPECT_EQ(plain.kind(), DeviceKind::CUDA);
  EXPECT_EQ(plain.index(), 0);
  EXPECT_TRUE(plain.is_cuda());
  EXPECT_FALSE(plain.is_cpu());
  EXPECT_EQ(plain.str(), "cuda:0");

  Device one("cuda:1");
  EXPECT_EQ(one.kind(), DeviceKind::CUDA);
  EXPECT_EQ(one.index(), 1);
  EXPECT_EQ(one.str(), "cuda:1");

  Device twelve(std::string("cuda:12"));
  EXPECT_EQ(twelve.index(), 12);
  EXPECT_EQ(Device(DeviceKind::CUDA, 3).str(), "cuda:3");
}

TEST(Device, EqualityComparesKindAndIndex) {
  EXPECT_EQ(Device("cuda"), kCUDA);
  EXPECT_EQ(Device("cuda:0"), Device(DeviceKind::CUDA, 0));
  EXPECT_NE(Device("cuda:1"), kCUDA);
  EXPECT_NE(Device("cuda:0"), kCPU);
  EXPECT_NE(Device("cuda:1"), Device("cuda:2"));
  EXPECT_TRUE(Device("cpu") == kCPU);
  EXPECT_FALSE(Device("cpu") != kCPU);
}

TEST(Device, PrintsThroughOstream) {
  std::ostringstream out;
  out << Device("cuda:2") << " " << kCPU;
  EXPECT_EQ(out.str(), "cuda:2 cpu");
  EXPECT_STREQ(device_kind_name(DeviceKind::CPU), "cpu");
  EXPECT_STREQ(device_kind_name(DeviceKind::CUDA), "cuda");
}

TEST(Device, RejectsInvalidSpecs) {
  for (const char* spec :
       {"gpu", "", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cpu:1", "cuda1", " cpu", "cuda:1:2", "cuda:1234567"}) {
    SCOPED_TRACE(spec);
    expect_error([&] { Device d(spec); }, {"Device"});
  }
  expect_error([] { Device d(DeviceKind::CUDA, -1); }, {"Device", "-1"});
  expect_error([] { Device d(DeviceKind::CPU, 1); }, {"Device"});
}

TEST(Device, CudaQueriesAnswerWithoutThrowingInThisBuild) {
  EXPECT_NO_THROW(cuda::is_available());
  EXPECT_NO_THROW(cuda::device_count());
  if (testing::cuda_is_emulated()) GTEST_SKIP() << "the CUDA emulation build has devices";
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
}

TEST(Device, AllocatingOnCudaWithoutBackendIsAnError) {
  if (cuda::is_available()) GTEST_SKIP() << "this build has a CUDA device";
  EXPECT_THROW(zeros({2}, kCUDA), Error);
  EXPECT_THROW(ones({2}).to(kCUDA), Error);
}

// ---------------------------------------------------------------------------------------------
// DType
// ---------------------------------------------------------------------------------------------

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(kFloat32), 4u);
  EXPECT_EQ(dtype_size(kFloat64), 8u);
  EXPECT_EQ(dtype_size(kFloat16), 2u);
  EXPECT_EQ(dtype_size(kBFloat16), 2u);
  EXPECT_EQ(dtype_size(kInt32), 4u);
  EXPECT_EQ(dtype_size(kInt64), 8u);
  EXPECT_EQ(dtype_size(kBool), 1u);
  EXPECT_STREQ(dtype_name(kFloat32), "float32");
  EXPECT_STREQ(dtype_name(kFloat64), "float64");
  EXPECT_STREQ(dtype_name(kFloat16), "float16");
  EXPECT_STREQ(dtype_name(kBFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(kInt32), "int32");
  EXPECT_STREQ(dtype_name(kInt64), "int64");
  EXPECT_STREQ(dtype_name(kBool), "bool");
  std::ostringstream out;
  out << kBFloat16;
  EXPECT_EQ(out.str(), "bfloat16");
}

TEST(DType, ParseAcceptsNamesAndAliases) {
  struct Case {
    const char* name;
    DType dtype;
  };
  for (const Case& c : std::vector<Case>{{"float32", kFloat32},
                                         {"f32", kFloat32},
                                         {"float", kFloat32},
                                         {"float64", kFloat64},
                                         {"f64", kFloat64},
                                         {"double", kFloat64},
                                         {"float16", kFloat16},
                                         {"f16", kFloat16},
                                         {"half", kFloat16},
                                         {"bfloat16", kBFloat16},
                                         {"bf16", kBFloat16},
                                         {"int32", kInt32},
                                         {"i32", kInt32},
                                         {"int", kInt32},
                                         {"int64", kInt64},
                                         {"i64", kInt64},
                                         {"long", kInt64},
                                         {"bool", kBool}}) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(parse_dtype(c.name), c.dtype);
  }
  // Every canonical name parses back to its dtype.
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
}

TEST(DType, ParseRejectsUnknownNames) {
  for (const char* name : {"float8", "", "Float32", "int8", "uint8", "complex64"}) {
    SCOPED_TRACE(name);
    expect_error([&] { parse_dtype(name); }, {"parse_dtype", name});
  }
}

TEST(DType, FloatingAndIntegralPredicates) {
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    EXPECT_TRUE(is_floating_point(t)) << t;
    EXPECT_FALSE(is_integral(t)) << t;
  }
  for (DType t : {kInt32, kInt64, kBool}) {
    EXPECT_FALSE(is_floating_point(t)) << t;
    EXPECT_TRUE(is_integral(t)) << t;
  }
  EXPECT_TRUE(zeros({2}).is_floating_point());
  EXPECT_FALSE(zeros({2}, kInt64).is_floating_point());
}

TEST(DType, PromotionTableMatchesPyTorch) {
  const std::vector<DType> order = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
  // Row/column order as in `order`; entries are torch.promote_types(row, col).
  const DType F32 = kFloat32, F64 = kFloat64, F16 = kFloat16, BF = kBFloat16, I32 = kInt32, I64 = kInt64, B = kBool;
  const DType table[7][7] = {
      /* f32  */ {F32, F64, F32, F32, F32, F32, F32},
      /* f64  */ {F64, F64, F64, F64, F64, F64, F64},
      /* f16  */ {F32, F64, F16, F32, F16, F16, F16},
      /* bf16 */ {F32, F64, F32, BF, BF, BF, BF},
      /* i32  */ {F32, F64, F16, BF, I32, I64, I32},
      /* i64  */ {F32, F64, F16, BF, I64, I64, I64},
      /* bool */ {F32, F64, F16, BF, I32, I64, B},
  };
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t j = 0; j < order.size(); ++j)
      EXPECT_EQ(promote_types(order[i], order[j]), table[i][j]) << order[i] << " with " << order[j];
}

// ---------------------------------------------------------------------------------------------
// Factories
// ---------------------------------------------------------------------------------------------

TEST(Factories, EmptyZerosOnesFull) {
  Tensor e = empty({2, 3});
  EXPECT_EQ(e.sizes(), (Shape{2, 3}));
  EXPECT_EQ(e.dtype(), kFloat32);
  EXPECT_EQ(e.device(), kCPU);
  EXPECT_FALSE(e.requires_grad());

  expect_close(zeros({2, 2}), {0, 0, 0, 0});
  expect_close(ones({3}), {1, 1, 1});
  expect_close(full({2}, 7.5), {7.5, 7.5});

  Tensor i = ones({4}, kInt64);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(ints(i), (std::vector<int64_t>{1, 1, 1, 1}));
  Tensor f = full({2, 2}, -3, TensorOptions().dtype(kFloat64));
  EXPECT_EQ(f.dtype(), kFloat64);
  expect_close(f, {-3, -3, -3, -3});
  Tensor b = full({2}, 2.0, kBool);
  EXPECT_EQ(ints(b), (std::vector<int64_t>{1, 1}));

  Tensor g = zeros({2}, TensorOptions().dtype(kFloat64).requires_grad(true));
  EXPECT_TRUE(g.requires_grad());
  EXPECT_TRUE(g.is_leaf());
}

TEST(Factories, ZeroSizedAndZeroDim) {
  Tensor z = zeros({0, 3});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(z.dim(), 2);
  Tensor s = zeros({});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 0.0);
  expect_error([] { zeros({2, -1}); }, {"negative"});
}

TEST(Factories, ArangeDefaultsToInt64) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.sizes(), (Shape{5}));
  EXPECT_EQ(ints(a), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ints(arange(2, 6)), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(ints(arange(0, 10, 3)), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(arange(3, 3).numel(), 0);
}

TEST(Factories, ArangeFloatStep) {
  Tensor a = arange(1.0, 2.0, 0.25, kFloat32);
  EXPECT_EQ(a.dtype(), kFloat32);
  expect_close(a, {1.0, 1.25, 1.5, 1.75}, 0);
  // Like PyTorch, the count is ceil((end - start) / step): 0.3 * 4 > 1 so 0.9 is the last.
  expect_close(arange(0.0, 1.0, 0.3, kFloat64), {0.0, 0.3, 0.6, 0.9}, 1e-12);
  EXPECT_EQ(arange(0.0, 1.0, 0.1, kFloat64).numel(), 10);
}

TEST(Factories, ArangeNegativeStep) {
  EXPECT_EQ(ints(arange(5, 0, -1)), (std::vector<int64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(ints(arange(10, 0, -3)), (std::vector<int64_t>{10, 7, 4, 1}));
  expect_close(arange(1.0, 0.0, -0.25, kFloat64), {1.0, 0.75, 0.5, 0.25}, 0);
}

TEST(Factories, ArangeRejectsBadArguments) {
  expect_error([] { arange(0, 5, 0); }, {"arange"});
  expect_error([] { arange(0, 5, -1); }, {"arange"});
  expect_error([] { arange(5, 0, 1); }, {"arange"});
  expect_error([] { arange(0, std::numeric_limits<double>::infinity(), 1); }, {"arange"});
}

TEST(Factories, LinspaceIncludesBothEnds) {
  Tensor l = linspace(0, 1, 5);
  EXPECT_EQ(l.dtype(), kFloat32);
  expect_close(l, {0, 0.25, 0.5, 0.75, 1.0}, 0);
  expect_close(linspace(-1, 1, 3, kFloat64), {-1, 0, 1}, 0);
  expect_close(linspace(5, 1, 5, kFloat64), {5, 4, 3, 2, 1}, 0);
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
}

TEST(Factories, LinspaceWithOneStepIsStart) {
  Tensor l = linspace(3, 7, 1);
  EXPECT_EQ(l.sizes(), (Shape{1}));
  EXPECT_EQ(l.item(), 3.0);
  expect_error([] { linspace(0, 1, -1); }, {"linspace"});
}

TEST(Factories, LinspaceEndpointsAreExactInFloat64) {
  // torch.linspace(0.1, 0.3, 4, dtype=torch.float64)[-1] == 0.3 exactly: PyTorch computes the
  // second half of the points from the end, so both ends are exact.
  for (int64_t steps : {4, 6, 7, 11}) {
    std::vector<double> v = linspace(0.1, 0.3, steps, kFloat64).tolist<double>();
    EXPECT_EQ(v.front(), 0.1) << "steps " << steps;
    EXPECT_EQ(v.back(), 0.3) << "steps " << steps << ": last value " << std::setprecision(17) << v.back();
  }
}

TEST(Factories, TensorFromValues) {
  Tensor f = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(f.sizes(), (Shape{2, 3}));
  expect_close(f, {1, 2, 3, 4, 5, 6}, 0);

  Tensor d = tensor<double>({0.5, 1.5});
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_EQ(d.sizes(), (Shape{2}));

  Tensor i32 = tensor<int32_t>({1, -2});
  EXPECT_EQ(i32.dtype(), kInt32);
  EXPECT_EQ(i32.tolist<int32_t>(), (std::vector<int32_t>{1, -2}));
  Tensor i64 = tensor<int64_t>({int64_t{1} << 40, -7});
  EXPECT_EQ(i64.dtype(), kInt64);
  EXPECT_EQ(i64.tolist<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -7}));

  Tensor converted = tensor<double>({1.5, 2.5}, {}, kFloat32);
  EXPECT_EQ(converted.dtype(), kFloat32);
  expect_close(converted, {1.5, 2.5}, 0);
  Tensor grad = tensor<double>({1.0}, {}, TensorOptions(kFloat64).requires_grad(true));
  EXPECT_TRUE(grad.requires_grad());

  expect_error([] { tensor<float>({1, 2, 3}, {2, 2}); }, {"tensor"});
}

TEST(Factories, ScalarTensor) {
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_EQ(s.item(), 2.5);
  Tensor i = scalar_tensor(3, kInt64);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.item<int64_t>(), 3);
}

TEST(Factories, FromBlobSharesTheCallersMemory) {
  std::vector<float> buffer = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(buffer.data(), {2, 3}, kFloat32);
  EXPECT_EQ(t.data_ptr(), buffer.data());
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  expect_close(t, {1, 2, 3, 4, 5, 6}, 0);
  // Writes through the tensor reach the buffer...
  t.select(0, 1).fill_(9);
  EXPECT_EQ(buffer, (std::vector<float>{1, 2, 3, 9, 9, 9}));
  t.mul_(2.0);
  EXPECT_EQ(buffer, (std::vector<float>{2, 4, 6, 18, 18, 18}));
  // ...and writes to the buffer are seen by the tensor.
  buffer[0] = -1;
  EXPECT_EQ(t.tolist<float>()[0], -1.0f);
}

TEST(Factories, FromBlobDeleterRunsWhenLastViewIsDropped) {
  int deleted = 0;
  void* seen = nullptr;
  auto* buffer = new double[4]{1, 2, 3, 4};
  {
    Tensor view;
    {
      Tensor t = from_blob(buffer, {4}, kFloat64, kCPU, [&](void* p) {
        ++deleted;
        seen = p;
        delete[] static_cast<double*>(p);
      });
      view = t.narrow(0, 1, 2);
      Tensor copy_of_handle = t;
    }
    EXPECT_EQ(deleted, 0) << "a view still uses the memory";
    expect_close(view, {2, 3}, 0);
  }
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(seen, static_cast<void*>(buffer));
}

TEST(Factories, FromBlobWithoutDeleterLeavesMemoryAlone) {
  std::vector<int32_t> buffer = {1, 2, 3};
  { Tensor t = from_blob(buffer.data(), {3}, kInt32); }
  EXPECT_EQ(buffer, (std::vector<int32_t>{1, 2, 3}));
  expect_error([] { from_blob(nullptr, {3}, kFloat32); }, {"from_blob"});
}

TEST(Factories, LikeFactoriesKeepShapeAndDtype) {
  Tensor base = ones({2, 3}, kFloat64);
  for (const Tensor& t : {empty_like(base), zeros_like(base), ones_like(base), full_like(base, 4.0)}) {
    EXPECT_EQ(t.sizes(), (Shape{2, 3}));
    EXPECT_EQ(t.dtype(), kFloat64);
    EXPECT_FALSE(same_storage(t, base));
  }
  expect_close(zeros_like(base), std::vector<double>(6, 0.0));
  expect_close(ones_like(base), std::vector<double>(6, 1.0));
  expect_close(full_like(base, 4.0), std::vector<double>(6, 4.0));
  Tensor ints_like = zeros_like(arange(3));
  EXPECT_EQ(ints_like.dtype(), kInt64);
  // A *_like factory does not copy requires_grad (like PyTorch's default).
  Tensor g = ones({2}).requires_grad_();
  EXPECT_FALSE(zeros_like(g).requires_grad());
}

// ---------------------------------------------------------------------------------------------
// Geometry and memory
// ---------------------------------------------------------------------------------------------

TEST(Geometry, SizesStridesNumelDim) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(-2), 4);
  EXPECT_EQ(t.itemsize(), 4u);
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_TRUE(t.is_contiguous());
  expect_error([&] { t.size(3); }, {"size"});
  expect_error([&] { t.stride(-4); }, {"stride"});
}

TEST(Geometry, UndefinedTensorThrowsOnUse) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  expect_error([&] { u.sizes(); }, {"undefined"});
  EXPECT_EQ(u.str(), "tensor(undefined)");
}

TEST(Geometry, ContiguityOfViews) {
  Tensor t = zeros({2, 3});
  EXPECT_FALSE(t.t().is_contiguous());
  EXPECT_TRUE(t.t().t().is_contiguous());
  EXPECT_TRUE(t.narrow(0, 1, 1).is_contiguous());
  EXPECT_FALSE(t.narrow(1, 0, 2).is_contiguous());
  EXPECT_FALSE(zeros({6}).slice(0, 0, 6, 2).is_contiguous());
  EXPECT_FALSE(zeros({3, 1}).expand({3, 4}).is_contiguous());
  EXPECT_TRUE(zeros({1, 3}).expand({1, 3}).is_contiguous());
  EXPECT_TRUE(t.unsqueeze(1).is_contiguous());
}

TEST(Memory, CpuAllocatorAlignsTo64Bytes) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kInt32, kInt64, kBool}) {
    for (int64_t n : {1, 3, 17, 100, 1000, 4097}) {
      Tensor t = empty({n}, dt);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u) << dt << " x " << n;
      Tensor z = zeros({n, 1}, dt);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(z.data_ptr()) % 64, 0u) << dt << " x " << n;
    }
  }
  Tensor r = rand({7, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data_ptr()) % 64, 0u);
  Tensor c = r.t().contiguous();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data_ptr()) % 64, 0u);
}

TEST(Memory, TypedDataPointerChecksDtype) {
  Tensor t = zeros({3});
  EXPECT_EQ(static_cast<void*>(t.data<float>()), t.data_ptr());
  expect_error([&] { t.data<double>(); }, {"data<T>", "float32", "float64"});
}

// ---------------------------------------------------------------------------------------------
// Views share storage
// ---------------------------------------------------------------------------------------------

// A fresh [2, 3] f32 tensor holding 0..5.
Tensor base23() {
  return arange(6, kFloat32).view({2, 3});
}

TEST(Views, ViewSharesStorageAndWritesReachBase) {
  Tensor base = base23();
  Tensor v = base.view({3, 2});
  EXPECT_TRUE(same_storage(v, base));
  EXPECT_EQ(v.strides(), (Shape{2, 1}));
  v.select(0, 2).fill_(-1);
  expect_close(base, {0, 1, 2, 3, -1, -1}, 0);
  Tensor flat = base.view({-1});
  EXPECT_EQ(flat.sizes(), (Shape{6}));
  EXPECT_TRUE(same_storage(flat, base));
  expect_error([&] { base.view({4, -1}); }, {"view"});
  expect_error([&] { base.view({-1, -1}); }, {"view"});
}

TEST(Views, TransposeStridesAndWriteThrough) {
  Tensor base = base23();
  Tensor t = base.transpose(0, 1);
  EXPECT_EQ(t.sizes(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 3}));
  EXPECT_TRUE(same_storage(t, base));
  EXPECT_EQ(values(t), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  {
    NoGradGuard no_grad;
    t.copy_(tensor<float>({10, 11, 12, 13, 14, 15}, {3, 2}));
  }
  expect_close(base, {10, 12, 14, 11, 13, 15}, 0);
  EXPECT_EQ(base.t().strides(), (Shape{1, 3}));
  EXPECT_EQ(base.transpose(-1, -2).sizes(), (Shape{3, 2}));
  // t() of a vector is the vector itself.
  Tensor v = zeros({4});
  EXPECT_EQ(v.t().sizes(), (Shape{4}));
  expect_error([] { zeros({2, 2, 2}).t(); }, {"t"});
}

TEST(Views, PermuteStridesAndWriteThrough) {
  Tensor base = arange(24, kFloat32).view({2, 3, 4});
  Tensor p = base.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_TRUE(same_storage(p, base));
  // p[3][1][2] is base[1][2][3] = 23.
  EXPECT_EQ(p.select(0, 3).select(0, 1).select(0, 2).item(), 23.0);
  p.select(0, 0).fill_(-5);  // base[:, :, 0]
  std::vector<double> v = values(base);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(v[i], i % 4 == 0 ? -5.0 : static_cast<double>(i)) << i;
  expect_error([&] { base.permute({0, 0, 1}); }, {"permute"});
  expect_error([&] { base.permute({0, 1}); }, {"permute"});
}

TEST(Views, NarrowOffsetStridesAndWriteThrough) {
  Tensor base = base23();
  Tensor n = base.narrow(1, 1, 2);
  EXPECT_EQ(n.sizes(), (Shape{2, 2}));
  EXPECT_EQ(n.strides(), (Shape{3, 1}));
  EXPECT_EQ(n.storage_offset(), 1);
  EXPECT_TRUE(same_storage(n, base));
  n.fill_(7);
  expect_close(base, {0, 7, 7, 3, 7, 7}, 0);
  expect_error([&] { base.narrow(1, 2, 2); }, {"narrow"});
  Tensor neg = base.narrow(-1, -1, 1);  // the last column
  EXPECT_EQ(neg.storage_offset(), 2);
}

TEST(Views, SliceWithStepDoublesStride) {
  Tensor base = arange(10, kFloat32);
  Tensor s = base.slice(0, 1, 8, 2);  // 1, 3, 5, 7
  EXPECT_EQ(s.sizes(), (Shape{4}));
  EXPECT_EQ(s.strides(), (Shape{2}));
  EXPECT_EQ(s.storage_offset(), 1);
  expect_close(s, {1, 3, 5, 7}, 0);
  s.fill_(0);
  expect_close(base, {0, 0, 2, 0, 4, 0, 6, 0, 8, 9}, 0);

  Tensor m = base23();
  Tensor cols = m.slice(1, 0, 3, 2);
  EXPECT_EQ(cols.sizes(), (Shape{2, 2}));
  EXPECT_EQ(cols.strides(), (Shape{3, 2}));
  // Python-style clamping and negative indices.
  EXPECT_EQ(base.slice(0, -3, 100).sizes(), (Shape{3}));
  EXPECT_EQ(base.slice(0, 5, 2).numel(), 0);
  expect_error([&] { base.slice(0, 0, 5, 0); }, {"slice"});
}

TEST(Views, SelectDropsTheDimAndWritesThrough) {
  Tensor base = base23();
  Tensor col = base.select(1, 1);
  EXPECT_EQ(col.sizes(), (Shape{2}));
  EXPECT_EQ(col.strides(), (Shape{3}));
  EXPECT_EQ(col.storage_offset(), 1);
  col.fill_(-2);
  expect_close(base, {0, -2, 2, 3, -2, 5}, 0);
  Tensor row = base[1];
  EXPECT_EQ(row.storage_offset(), 3);
  expect_close(row, {3, -2, 5}, 0);
  EXPECT_EQ(base.select(0, -1).storage_offset(), 3);
  expect_error([&] { base.select(0, 2); }, {"select"});
  Tensor scalar = row.select(0, 2);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item(), 5.0);
}

TEST(Views, SqueezeAndUnsqueeze) {
  Tensor base = zeros({2, 1, 3});
  Tensor sq = base.squeeze();
  EXPECT_EQ(sq.sizes(), (Shape{2, 3}));
  EXPECT_EQ(sq.strides(), (Shape{3, 1}));
  EXPECT_TRUE(same_storage(sq, base));
  sq.select(1, 2).fill_(4);
  expect_close(base, {0, 0, 4, 0, 0, 4}, 0);
  EXPECT_EQ(base.squeeze(1).sizes(), (Shape{2, 3}));
  EXPECT_EQ(base.squeeze(0).sizes(), (Shape{2, 1, 3}));  // size 2: unchanged

  Tensor m = base23();
  Tensor u = m.unsqueeze(1);
  EXPECT_EQ(u.sizes(), (Shape{2, 1, 3}));
  EXPECT_EQ(u.strides(), (Shape{3, 3, 1}));
  EXPECT_TRUE(same_storage(u, m));
  EXPECT_EQ(m.unsqueeze(-1).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(m.unsqueeze(-1).strides(), (Shape{3, 1, 1}));
  EXPECT_EQ(m.unsqueeze(0).sizes(), (Shape{1, 2, 3}));
  u.fill_(1);
  expect_close(m, std::vector<double>(6, 1.0), 0);
  expect_error([&] { m.unsqueeze(4); }, {"unsqueeze"});
}

TEST(Views, ExpandHasZeroStrideAndSharesStorage) {
  Tensor col = tensor<float>({1, 2, 3}, {3, 1});
  Tensor e = col.expand({3, 4});
  EXPECT_EQ(e.sizes(), (Shape{3, 4}));
  EXPECT_EQ(e.strides(), (Shape{1, 0}));
  EXPECT_TRUE(same_storage(e, col));
  expect_close(e, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, 0);

  Tensor row = tensor<float>({1, 2, 3});
  Tensor lead = row.expand({2, 3});
  EXPECT_EQ(lead.strides(), (Shape{0, 1}));
  EXPECT_EQ(row.expand({-1}).sizes(), (Shape{3}));
  EXPECT_EQ(col.expand({2, -1, 5}).strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(col.expand_as(zeros({3, 2})).sizes(), (Shape{3, 2}));

  // A write through the expanded view lands in the base.
  lead.select(0, 1).select(0, 1).fill_(20);
  expect_close(row, {1, 20, 3}, 0);
  expect_error([&] { row.expand({2, 4}); }, {"expand"});
  expect_error([&] { col.expand({4}); }, {"expand"});
}

TEST(Views, SplitAndChunkAreViews) {
  Tensor base = arange(5, kFloat32);
  std::vector<Tensor> pieces = split(base, 2);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].sizes(), (Shape{1}));
  for (const Tensor& p : pieces) EXPECT_TRUE(same_storage(p, base));
  EXPECT_EQ(pieces[1].storage_offset(), 2);
  pieces[1].fill_(-1);
  expect_close(base, {0, 1, -1, -1, 4}, 0);

  std::vector<Tensor> sized = split(base, std::vector<int64_t>{1, 4});
  ASSERT_EQ(sized.size(), 2u);
  EXPECT_EQ(sized[1].sizes(), (Shape{4}));
  expect_error([&] { split(base, std::vector<int64_t>{1, 3}); }, {"split"});

  Tensor m = arange(8, kFloat32).view({2, 4});
  std::vector<Tensor> halves = chunk(m, 2, 1);
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[1].sizes(), (Shape{2, 2}));
  EXPECT_EQ(halves[1].strides(), (Shape{4, 1}));
  EXPECT_EQ(halves[1].storage_offset(), 2);
  {
    NoGradGuard no_grad;
    halves[1].copy_(tensor<float>({9, 8}));
  }
  expect_close(m, {0, 1, 9, 8, 4, 5, 9, 8}, 0);
  EXPECT_EQ(chunk(arange(5), 3).size(), 3u);  // sizes 2, 2, 1
}

TEST(Views, ReshapeOfNonContiguousCopies) {
  Tensor base = base23();
  Tensor t = base.t();
  Tensor r = t.reshape({6});
  EXPECT_FALSE(same_storage(r, base));
  EXPECT_TRUE(r.is_contiguous());
  expect_close(r, {0, 3, 1, 4, 2, 5}, 0);
  r.fill_(100);
  expect_close(base, {0, 1, 2, 3, 4, 5}, 0);
  expect_error([&] { t.view({6}); }, {"view", "reshape"});
}

TEST(Views, ReshapeOrViewOfContiguousShares) {
  Tensor base = base23();
  Tensor r = base.reshape({3, 2});
  EXPECT_TRUE(same_storage(r, base));
  Tensor v = base.view({6});
  EXPECT_TRUE(same_storage(v, base));
  v.select(0, 0).fill_(42);
  EXPECT_EQ(base.select(0, 0).select(0, 0).item(), 42.0);
  Tensor f = zeros({2, 3, 4}).flatten(1);
  EXPECT_EQ(f.sizes(), (Shape{2, 12}));
  // A transposed tensor can still be viewed when only its trailing contiguous block is split.
  Tensor tt = zeros({4, 6}).t();  // [6, 4], strides [1, 6]
  EXPECT_EQ(tt.view({2, 3, 4}).strides(), (Shape{3, 1, 6}));
}

TEST(Views, ContiguousIsNoOpWhenAlreadyContiguous) {
  Tensor base = base23();
  Tensor c = base.contiguous();
  EXPECT_TRUE(c.is_same(base));
  Tensor t = base.t();
  Tensor tc = t.contiguous();
  EXPECT_FALSE(same_storage(tc, base));
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_EQ(tc.strides(), (Shape{2, 1}));
  expect_close(tc, {0, 3, 1, 4, 2, 5}, 0);
}

// ---------------------------------------------------------------------------------------------
// Conversions and copies
// ---------------------------------------------------------------------------------------------

TEST(Convert, ToSameDtypeReturnsSelf) {
  Tensor t = ones({3});
  EXPECT_TRUE(t.to(kFloat32).is_same(t));
  EXPECT_TRUE(t.to(kCPU).is_same(t));
  EXPECT_TRUE(t.cpu().is_same(t));
}

TEST(Convert, FloatToIntTruncatesTowardZero) {
  Tensor f = tensor<double>({2.7, -2.7, 0.5, -0.5, 3.0, 1e9});
  EXPECT_EQ(f.to(kInt64).tolist<int64_t>(), (std::vector<int64_t>{2, -2, 0, 0, 3, 1000000000}));
  EXPECT_EQ(f.to(kInt32).tolist<int32_t>(), (std::vector<int32_t>{2, -2, 0, 0, 3, 1000000000}));
  EXPECT_EQ(f.to(kInt32).dtype(), kInt32);
}

TEST(Convert, IntToFloat) {
  Tensor i = tensor<int64_t>({1, -2, int64_t{1} << 40});
  expect_close(i.to(kFloat64), {1, -2, 1099511627776.0}, 0);
  expect_close(i.to(kFloat32), {1, -2, 1099511627776.0}, 0);
}

TEST(Convert, BoolConversion) {
  Tensor f = tensor<float>({0, 0.5f, -2, std::numeric_limits<float>::quiet_NaN(), -0.0f});
  Tensor b = f.to(kBool);
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(ints(b), (std::vector<int64_t>{0, 1, 1, 1, 0}));
  EXPECT_EQ(ints(tensor<int64_t>({0, 3, -1}).to(kBool)), (std::vector<int64_t>{0, 1, 1}));
  expect_close(b.to(kFloat32), {0, 1, 1, 1, 0}, 0);
}

TEST(Convert, HalfRoundTripsExactValues) {
  std::vector<float> exact = {0.0f,
                              1.0f,
                              -2.0f,
                              0.5f,
                              1024.0f,
                              65504.0f,
                              0.0999755859375f,
                              6.103515625e-05f,
                              5.9604644775390625e-08f /* smallest subnormal, 2^-24 */,
                              -3.140625f};
  Tensor h = tensor<float>(exact).to(kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(h.itemsize(), 2u);
  EXPECT_EQ(h.to(kFloat32).tolist<float>(), exact);
  // f64 -> f16 directly as well.
  std::vector<double> exact_d(exact.begin(), exact.end());
  EXPECT_EQ(tensor<double>(exact_d).to(kFloat16).to(kFloat64).tolist<double>(), exact_d);
}

TEST(Convert, BFloat16RoundTripsExactValues) {
  std::vector<float> exact = {
      0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 1.5f, 0.333984375f, std::ldexp(1.0f, 100), std::ldexp(1.0f, -100), -256.0f};
  Tensor b = tensor<float>(exact).to(kBFloat16);
  EXPECT_EQ(b.dtype(), kBFloat16);
  EXPECT_EQ(b.to(kFloat32).tolist<float>(), exact);
}

TEST(Convert, SixteenBitRoundingToNearest) {
  Tensor third = tensor<float>({1.0f / 3.0f});
  EXPECT_EQ(third.to(kBFloat16).to(kFloat32).item<float>(), 0.333984375f);
  EXPECT_EQ(third.to(kFloat16).to(kFloat32).item<float>(), 0.333251953125f);
  EXPECT_EQ(third.to(kBFloat16).to(kFloat64).item(), 0.333984375);
  EXPECT_EQ(third.to(kFloat16).item(), 0.333251953125);
  // Ties round to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 in f16.
  EXPECT_EQ(tensor<float>({1.0f + std::ldexp(1.0f, -11)}).to(kFloat16).item(), 1.0);
  EXPECT_EQ(tensor<float>({1.0f + 3 * std::ldexp(1.0f, -11)}).to(kFloat16).item(), 1.0 + std::ldexp(1.0, -9));
  // Overflow to infinity and NaN survive.
  std::vector<double> special = tensor<float>({70000.0f, -70000.0f, std::numeric_limits<float>::quiet_NaN()})
                                    .to(kFloat16)
                                    .to(kFloat64)
                                    .tolist<double>();
  EXPECT_TRUE(std::isinf(special[0]) && special[0] > 0);
  EXPECT_TRUE(std::isinf(special[1]) && special[1] < 0);
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_TRUE(std::isnan(tensor<float>({std::numeric_limits<float>::quiet_NaN()}).to(kBFloat16).item()));
}

TEST(Convert, SixteenBitComputesOnCpu) {
  Tensor h = ones({2}).to(kFloat16);
  EXPECT_EQ(exp(h).dtype(), kFloat16);  // values: test_cpu_16bit_ops.cpp
  EXPECT_EQ(add(h, h).to(kFloat32).tolist<float>(), (std::vector<float>{2.0f, 2.0f}));
  // Converting, copying and printing work too.
  EXPECT_EQ(h.clone().dtype(), kFloat16);
  EXPECT_NE(h.str().find("dtype=float16"), std::string::npos) << h.str();
}

TEST(Copies, CloneIsIndependent) {
  Tensor x = tensor<float>({1, 2, 3});
  Tensor c = x.clone();
  EXPECT_FALSE(same_storage(c, x));
  c.fill_(0);
  expect_close(x, {1, 2, 3}, 0);
  x.fill_(5);
  expect_close(c, {0, 0, 0}, 0);
  Tensor t = base23().t().clone();
  EXPECT_EQ(t.sizes(), (Shape{3, 2}));
  expect_close(t, {0, 3, 1, 4, 2, 5}, 0);
}

TEST(Copies, CopyBroadcastsAndConverts) {
  Tensor dst = zeros({2, 3});
  dst.copy_(tensor<int64_t>({1, 2, 3}));
  EXPECT_EQ(dst.dtype(), kFloat32);
  expect_close(dst, {1, 2, 3, 1, 2, 3}, 0);
  dst.copy_(tensor<double>({0.5, -0.5}, {2, 1}));
  expect_close(dst, {0.5, 0.5, 0.5, -0.5, -0.5, -0.5}, 0);
  dst.copy_(scalar_tensor(7));
  expect_close(dst, std::vector<double>(6, 7), 0);
  Tensor idst = zeros({3}, kInt32);
  idst.copy_(tensor<float>({1.9f, -1.9f, 2.0f}));
  EXPECT_EQ(idst.tolist<int32_t>(), (std::vector<int32_t>{1, -1, 2}));
  expect_error([&] { dst.copy_(zeros({4})); }, {"copy_"});
  expect_error([&] { zeros({3}).copy_(zeros({2, 3})); }, {"copy_"});
}

TEST(Copies, CopyFromOverlappingMemoryReadsFirst) {
  Tensor x = tensor<float>({1, 2, 3, 4});
  x.narrow(0, 1, 3).copy_(x.narrow(0, 0, 3));  // like x[1:] = x[:-1].clone()
  expect_close(x, {1, 1, 2, 3}, 0);
  Tensor sq = arange(4, kFloat32).view({2, 2});
  sq.copy_(sq.t());
  expect_close(sq, {0, 2, 1, 3}, 0);
}

TEST(Copies, ItemAndTolist) {
  EXPECT_EQ(scalar_tensor(2.5).item(), 2.5);
  EXPECT_EQ(tensor<float>({4}).item<float>(), 4.0f);
  EXPECT_EQ(tensor<int64_t>({-9}, {1, 1}).item<int64_t>(), -9);
  EXPECT_EQ(tensor<float>({1.5f}).item<int32_t>(), 1);
  expect_error([] { zeros({2}).item(); }, {"item"});
  // tolist follows logical (row-major) order, also for views.
  EXPECT_EQ(base23().t().tolist<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(arange(4).tolist<double>(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_TRUE(zeros({0}).tolist<float>().empty());
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

TEST(Printing, VectorOfFloats) {
  EXPECT_EQ(tensor<float>({1, -2.5}).str(), "tensor([ 1.0000, -2.5000])");
  EXPECT_EQ(tensor<float>({0.5, 2}).str(), "tensor([0.5000, 2.0000])");
  std::ostringstream out;
  out << tensor<float>({1, -2.5});
  EXPECT_EQ(out.str(), "tensor([ 1.0000, -2.5000])");
}

TEST(Printing, MatrixRowsAlignLikePyTorch) {
  EXPECT_EQ(tensor<float>({1, -2.5, 3, 4}, {2, 2}).str(),
            "tensor([[ 1.0000, -2.5000],\n"
            "        [ 3.0000,  4.0000]])");
  EXPECT_EQ(tensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}).str(),
            "tensor([[[1.0000, 2.0000],\n"
            "         [3.0000, 4.0000]],\n"
            "\n"
            "        [[5.0000, 6.0000],\n"
            "         [7.0000, 8.0000]]])");
  // Printing a non-contiguous view prints its logical order.
  EXPECT_EQ(tensor<float>({1, 2, 3, 4}, {2, 2}).t().str(),
            "tensor([[1.0000, 3.0000],\n"
            "        [2.0000, 4.0000]])");
}

TEST(Printing, IntegersBoolsAndDtypes) {
  EXPECT_EQ(tensor<int64_t>({1, -2, 30}).str(), "tensor([ 1, -2, 30])");
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2])");
  EXPECT_EQ(tensor<int32_t>({1, 2}).str(), "tensor([1, 2], dtype=int32)");
  EXPECT_EQ(tensor<double>({1, 2}).str(), "tensor([1.0000, 2.0000], dtype=float64)");
  std::string b = tensor<float>({0, 1}).to(kBool).str();
  EXPECT_NE(b.find("true"), std::string::npos) << b;
  EXPECT_NE(b.find("false"), std::string::npos) << b;
  EXPECT_EQ(b.find("dtype"), std::string::npos) << b;
}

TEST(Printing, LargeInt64ValuesPrintExactly) {
  // torch.tensor([2**53 + 1]) prints tensor([9007199254740993]); int64 values must not go through double.
  EXPECT_EQ(tensor<int64_t>({9007199254740993LL}).str(), "tensor([9007199254740993])");
  EXPECT_EQ(tensor<int64_t>({std::numeric_limits<int64_t>::max()}).str(), "tensor([9223372036854775807])");
  EXPECT_EQ(tensor<int64_t>({std::numeric_limits<int64_t>::min()}).str(), "tensor([-9223372036854775808])");
}

TEST(Printing, AutogradState) {
  Tensor leaf = tensor<float>({1, 2}).requires_grad_();
  EXPECT_EQ(leaf.str(), "tensor([1.0000, 2.0000], requires_grad=true)");
  Tensor y = leaf * 2;
  std::string s = y.str();
  EXPECT_EQ(s.rfind("tensor([2.0000, 4.0000], grad_fn=<", 0), 0u) << s;
  EXPECT_EQ(s.back(), ')');
  EXPECT_NE(s.find(">)"), std::string::npos) << s;
  EXPECT_EQ(s.find("requires_grad"), std::string::npos) << s;
  Tensor d64 = tensor<double>({1}).requires_grad_();
  EXPECT_EQ(d64.str(), "tensor([1.0000], dtype=float64, requires_grad=true)");
}

TEST(Printing, ZeroDimAndEmpty) {
  EXPECT_EQ(scalar_tensor(3).str(), "tensor(3.0000)");
  EXPECT_EQ(scalar_tensor(-1.5, kFloat64).str(), "tensor(-1.5000, dtype=float64)");
  EXPECT_EQ(scalar_tensor(7, kInt64).str(), "tensor(7)");
  EXPECT_EQ(zeros({0}).str(), "tensor([])");
}

TEST(Printing, ScientificForTinyValues) {
  EXPECT_EQ(tensor<float>({1e-5f, 2}).str(), "tensor([1.0000e-05, 2.0000e+00])");
  EXPECT_EQ(tensor<float>({1e9f}).str(), "tensor([1.0000e+09])");
}

TEST(Printing, ScientificForWideDynamicRangeLikePyTorch) {
  // PyTorch switches to scientific notation when max / min of the nonzero magnitudes exceeds 1000:
  // torch.tensor([1e-3, 1e5]) prints as tensor([1.0000e-03, 1.0000e+05]).
  EXPECT_EQ(tensor<float>({1e-3f, 1e5f}).str(), "tensor([1.0000e-03, 1.0000e+05])");
}

TEST(Printing, NanAndInfinity) {
  float inf = std::numeric_limits<float>::infinity();
  std::string s = tensor<float>({std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1}).str();
  EXPECT_NE(s.find("nan"), std::string::npos) << s;
  EXPECT_NE(s.find("-inf"), std::string::npos) << s;
  EXPECT_NE(s.find("1.0000"), std::string::npos) << s;
}

TEST(Printing, BigTensorsAreSummarised) {
  std::string s = arange(2000).str();
  EXPECT_NE(s.find("..."), std::string::npos) << s;
  EXPECT_LT(s.size(), 100u) << s;
  EXPECT_EQ(s.rfind("tensor([   0,    1,    2,", 0), 0u) << s;
  EXPECT_NE(s.find("1997, 1998, 1999])"), std::string::npos) << s;
  EXPECT_EQ(s.find("1000"), std::string::npos) << s;

  std::string m = zeros({100, 100}).str();
  EXPECT_NE(m.find("..."), std::string::npos);
  EXPECT_LT(m.size(), 1000u) << m;

  // 1000 elements or fewer print in full.
  std::string full_print = arange(1000).str();
  EXPECT_EQ(full_print.find("..."), std::string::npos);
  EXPECT_NE(full_print.find(" 500,"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------------------------

class Runtime : public testing::RestoresThreadCount {};

TEST_F(Runtime, SetAndGetNumThreads) {
  EXPECT_GE(get_num_threads(), 1);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  expect_error([] { set_num_threads(0); }, {"set_num_threads"});
  expect_error([] { set_num_threads(-2); }, {"set_num_threads"});
  EXPECT_EQ(get_num_threads(), 3);
  // Kernels still give the same answers with another thread count.
  Tensor big = ones({100000});
  EXPECT_EQ(big.sum().item(), 100000.0);
}

TEST_F(Runtime, SetNumThreadsIsProcessWide) {
  // runtime.h documents "process-wide runtime settings": a thread started after the call (say a
  // data-loading or training worker) must see the same count.
  for (int wanted : {1, 3}) {
    set_num_threads(wanted);
    int seen = -1;
    std::thread worker([&] { seen = get_num_threads(); });
    worker.join();
    EXPECT_EQ(seen, wanted) << "set_num_threads(" << wanted << ") on the main thread";
  }
}

TEST(EmptyTensors, AreContiguousAndRandomFillsAccept) {
  EXPECT_TRUE(zeros({0, 5}).is_contiguous());
  EXPECT_EQ(randn({0, 5}).numel(), 0);
  EXPECT_EQ(rand({4, 0}).numel(), 0);
  EXPECT_TRUE(zeros({3, 0}).t().is_contiguous());
  EXPECT_EQ(shape_numel({int64_t{1} << 40, int64_t{1} << 40, 0}), 0);
  // Found by fuzzing the IDX reader: an empty shape whose other dims overflow int64 strides.
  expect_error(
      [] {
        zeros({0, int64_t{1} << 40, int64_t{1} << 40});
      },
      {"[0, 1099511627776, 1099511627776]", "too large"});
  expect_error([] { (void)shape_numel({int64_t{1} << 40, int64_t{1} << 40}); }, {"int64"});
}

}  // namespace
}  // namespace tapegrad
