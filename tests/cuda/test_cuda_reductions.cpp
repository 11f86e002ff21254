// CPU/CUDA parity of the reduction family through the public ops: sum, mean, var, max, min and
// argmax over every dim, softmax and log_softmax with their backward, cross-entropy forward and
// backward, and the index ops with their backward. Inputs are made on the CPU and copied, so both
// devices see the same numbers. The cases skip where no GPU is present.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/random_values.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor gpu(const Tensor& t) {
  return t.to(kCUDA);
}

using testing::uniform;

// Small integers (many ties) in `dtype`.
Tensor small_integers(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randint(-3, 4, shape, TensorOptions(kInt64), &g).to(dtype);
}

Tensor indices(const std::vector<int64_t>& v, const Shape& shape) {
  return tensor<int64_t>(v, shape);
}

void expect_parity(const Tensor& cpu_result, const Tensor& cuda_result, double rtol, double atol,
                   const std::string& what) {
  testing::expect_parity(cuda_result, cpu_result, {rtol, atol}, what);
}

void expect_equal(const Tensor& cpu_result, const Tensor& cuda_result, const std::string& what) {
  expect_parity(cpu_result, cuda_result, 0.0, 0.0, what);
}

std::string describe(const Shape& shape, const std::string& dims, bool keepdim, DType dtype) {
  return shape_str(shape) + " dims " + dims + (keepdim ? " keepdim " : " ") + dtype_name(dtype);
}

double sum_rtol(DType dtype) {
  return dtype == kFloat32 ? 2e-6 : 1e-12;
}

// Shapes covering: inner == 1 and inner > 1, outer 1 and large, reduced 1, 31, 32, 33, 1000 and
// 1 << 20, few outputs over a long reduced dim (split across blocks), many short rows.
const std::vector<Shape>& reduce_shapes() {
  static const std::vector<Shape> shapes = {{7, 5, 3},
                                            {4, 1, 6},
                                            {3, 31},
                                            {32, 5},
                                            {2, 33, 70},
                                            {5, 1000},
                                            {1000, 3},
                                            {2, 1000, testing::gpu_size(300, 30)},
                                            {testing::gpu_size(1 << 20, 1 << 14)},
                                            {2, testing::gpu_size(1 << 20, 1 << 14)},
                                            {testing::gpu_size(1 << 20, 1 << 10), 2},
                                            {testing::gpu_size(4096, 1024), 33},
                                            {3, testing::gpu_size(70000, 3000), 3},
                                            {1, 1, 1}};
  return shapes;
}

// Sum, mean and var of real-valued data over each dim, a non-adjacent pair, and everything.
TEST(CudaReduceParity, SumMeanVarOverEveryDim) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Shape& shape : reduce_shapes()) {
      Tensor x = uniform(shape, dtype, seed++);
      Tensor xg = gpu(x);
      const double rtol = sum_rtol(dtype);
      expect_parity(sum(x), sum(xg), rtol, 1e-6, describe(shape, "all", false, dtype) + " sum");
      expect_parity(mean(x), mean(xg), rtol, 1e-7, describe(shape, "all", false, dtype) + " mean");
      expect_parity(var(x), var(xg), 10 * rtol, 1e-7, describe(shape, "all", false, dtype) + " var");
      std::vector<Shape> dim_sets;
      for (int64_t d = 0; d < x.dim(); ++d) dim_sets.push_back({d});
      if (x.dim() >= 3) dim_sets.push_back({0, x.dim() - 1});
      for (const Shape& dims : dim_sets) {
        for (bool keepdim : {false, true}) {
          const std::string what = describe(shape, shape_str(dims), keepdim, dtype);
          expect_parity(sum(x, dims, keepdim), sum(xg, dims, keepdim), rtol, 1e-6, what + " sum");
          expect_parity(mean(x, dims, keepdim), mean(xg, dims, keepdim), rtol, 1e-7, what + " mean");
          expect_parity(var(x, dims, 1.0, keepdim), var(xg, dims, 1.0, keepdim), 10 * rtol, 1e-7, what + " var");
        }
      }
    }
  }
}

// Max, min (values and indices) and argmax over data full of ties: the index must be the first.
TEST(CudaReduceParity, MaxMinArgmaxTakeTheFirstIndex) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType dtype : {kFloat32, kFloat64, kInt32, kInt64}) {
    for (const Shape& shape : reduce_shapes()) {
      for (bool ties : {true, false}) {
        if (!ties && (dtype == kInt32 || dtype == kInt64)) continue;
        Tensor x = ties ? small_integers(shape, dtype, seed++) : uniform(shape, dtype, seed++);
        Tensor xg = gpu(x);
        const std::string kind = ties ? " ties" : " real";
        expect_equal(max(x), max(xg), describe(shape, "all", false, dtype) + kind + " max");
        expect_equal(min(x), min(xg), describe(shape, "all", false, dtype) + kind + " min");
        expect_equal(argmax(x), argmax(xg), describe(shape, "all", false, dtype) + kind + " argmax");
        for (int64_t d = 0; d < x.dim(); ++d) {
          for (bool keepdim : {false, true}) {
            const std::string what = describe(shape, std::to_string(d), keepdim, dtype) + kind;
            ValuesIndices c = max(x, d, keepdim), g = max(xg, d, keepdim);
            expect_equal(c.values, g.values, what + " max values");
            expect_equal(c.indices, g.indices, what + " max indices");
            c = min(x, d, keepdim);
            g = min(xg, d, keepdim);
            expect_equal(c.values, g.values, what + " min values");
            expect_equal(c.indices, g.indices, what + " min indices");
            expect_equal(argmax(x, d, keepdim), argmax(xg, d, keepdim), what + " argmax");
            expect_equal(argmin(x, d, keepdim), argmin(xg, d, keepdim), what + " argmin");
          }
        }
      }
    }
  }
}

TEST(CudaReduceParity, IntegerAndBoolSumsAreInt64) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {kInt32, kInt64}) {
    for (const Shape& shape : {Shape{33, 1000}, Shape{1 << 20}, Shape{3, 70000, 3}}) {
      Tensor x = small_integers(shape, dtype, 7);
      Tensor xg = gpu(x);
      expect_equal(sum(x), sum(xg), describe(shape, "all", false, dtype) + " sum");
      for (int64_t d = 0; d < x.dim(); ++d)
        expect_equal(sum(x, {d}), sum(xg, {d}), describe(shape, std::to_string(d), false, dtype) + " sum");
    }
  }
  Tensor flags = gt(uniform({70, 1001}, kFloat32, 8), 0.0);
  Tensor flags_gpu = gpu(flags);
  expect_equal(sum(flags), sum(flags_gpu), "bool sum");
  expect_equal(sum(flags, {0}), sum(flags_gpu, {0}), "bool sum dim 0");
  expect_equal(sum(flags, {1}), sum(flags_gpu, {1}), "bool sum dim 1");
}

// A NaN anywhere in the reduced range wins max and min (the first NaN's index) and poisons sums.
TEST(CudaReduceParity, NaNPropagates) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Shape& shape : {Shape{6, 40}, Shape{40, 6}, Shape{3, 5000}, Shape{1 << 20}}) {
      std::vector<double> v = values(uniform(shape, kFloat64, 9));
      for (size_t i = 3; i < v.size(); i += v.size() / 7 + 1) v[i] = kNaN;
      v[v.size() - 1] = kNaN;
      Tensor x = tensor<double>(v, shape).to(dtype);
      Tensor xg = gpu(x);
      expect_equal(max(x), max(xg), describe(shape, "all", false, dtype) + " max");
      expect_equal(argmax(x), argmax(xg), describe(shape, "all", false, dtype) + " argmax");
      expect_parity(sum(x), sum(xg), sum_rtol(dtype), 1e-6, describe(shape, "all", false, dtype) + " sum");
      for (int64_t d = 0; d < x.dim(); ++d) {
        const std::string what = describe(shape, std::to_string(d), false, dtype);
        ValuesIndices c = max(x, d), g = max(xg, d);
        expect_equal(c.values, g.values, what + " max values");
        expect_equal(c.indices, g.indices, what + " max indices");
        c = min(x, d);
        g = min(xg, d);
        expect_equal(c.values, g.values, what + " min values");
        expect_equal(c.indices, g.indices, what + " min indices");
        expect_parity(sum(x, {d}), sum(xg, {d}), sum_rtol(dtype), 1e-6, what + " sum");
      }
    }
  }
}

TEST(CudaReduceParity, EmptyInputs) {
  SKIP_WITHOUT_GPU();
  Tensor x = zeros({0, 3}, kFloat32);
  Tensor xg = gpu(x);
  expect_equal(sum(x, {0}), sum(xg, {0}), "sum over an empty dim");
  expect_equal(mean(x, {0}), mean(xg, {0}), "mean over an empty dim");
  expect_equal(sum(x, {1}), sum(xg, {1}), "sum to an empty output");
  expect_equal(sum(x), sum(xg), "sum of nothing");
  expect_equal(max(x, 1).values, max(xg, 1).values, "max to an empty output");
}

TEST(CudaReduceParity, MaxBackwardGoesToTheIndex) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform({33, 70}, kFloat64, 11);
  Tensor xc = x.clone().requires_grad_(true), xg = gpu(x).requires_grad_(true);
  Tensor w = uniform({70}, kFloat64, 12);
  max(xc, 0).values.backward(w);
  max(xg, 0).values.backward(gpu(w));
  expect_parity(xc.grad(), xg.grad(), 1e-12, 0.0, "max backward");
}

// ---------------------------------------------------------------------------------------------
// softmax and log_softmax
// ---------------------------------------------------------------------------------------------

TEST(CudaSoftmaxParity, ForwardAndBackwardOverColumnCounts) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 200;
  for (DType dtype : {kFloat32, kFloat64}) {
    // f32 rows are summed in different orders on the two devices (sequential vs tree).
    const double rtol = dtype == kFloat32 ? 1e-4 : 1e-12, atol = dtype == kFloat32 ? 1e-5 : 1e-14;
    for (int64_t cols : {1, 10, 1000, 1025, 5000}) {
      for (int64_t rows : {int64_t{1}, int64_t{37}, testing::gpu_size(3000, 300)}) {
        if (rows * cols > 4000000) continue;
        for (bool log : {false, true}) {
          // Logits spread over [-20, 20): exp() underflows for some and the max subtraction matters.
          Tensor x = uniform({rows, cols}, dtype, seed++, -20.0, 20.0);
          Tensor w = uniform({rows, cols}, dtype, seed++);
          Tensor xc = x.clone().requires_grad_(true), xg = gpu(x).requires_grad_(true);
          Tensor yc = log ? log_softmax(xc, -1) : softmax(xc, -1);
          Tensor yg = log ? log_softmax(xg, -1) : softmax(xg, -1);
          const std::string what =
              std::string(log ? "log_softmax " : "softmax ") + shape_str({rows, cols}) + " " + dtype_name(dtype);
          expect_parity(yc, yg, rtol, atol, what);
          yc.backward(w);
          yg.backward(gpu(w));
          expect_parity(xc.grad(), xg.grad(), 10 * rtol, 10 * atol, what + " backward");
        }
      }
    }
  }
}

TEST(CudaSoftmaxParity, OtherDimsAndLargeLogits) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform({6, 1100, 5}, kFloat32, 300, -1000.0, 1000.0);
  Tensor xg = gpu(x);
  for (int64_t d = 0; d < 3; ++d) {
    expect_parity(softmax(x, d), softmax(xg, d), 1e-4, 1e-6, "softmax dim " + std::to_string(d));
    expect_parity(log_softmax(x, d), log_softmax(xg, d), 1e-4, 1e-4, "log_softmax dim " + std::to_string(d));
  }
}

TEST(CudaSoftmaxParity, HalfInputsComputeInFloat) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform({40, 700}, kFloat32, 301, -4.0, 4.0).to(kFloat16).to(kFloat32);  // representable in f16
  Tensor yc = softmax(x, 1);
  Tensor yg = softmax(gpu(x.to(kFloat16)), 1);
  expect_parity(yc, yg.to(kFloat32), 2e-3, 1e-4, "softmax f16");
  expect_parity(sum(x, {1}), sum(gpu(x.to(kFloat16)), {1}).to(kFloat32), 2e-3, 1e-2, "sum f16");
}

// ---------------------------------------------------------------------------------------------
// cross_entropy
// ---------------------------------------------------------------------------------------------

// Targets in [0, classes), with every fifth row set to ignore_index.
Tensor targets_for(int64_t rows, int64_t classes, int64_t ignore_index, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t = randint(0, classes, {rows}, TensorOptions(kInt64), &g).tolist<int64_t>();
  for (size_t i = 0; i < t.size(); i += 5) t[i] = ignore_index;
  return indices(t, {rows});
}

TEST(CudaCrossEntropyParity, ReductionsIgnoreIndexAndSmoothing) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 400;
  for (DType dtype : {kFloat32, kFloat64}) {
    const double rtol = dtype == kFloat32 ? 5e-5 : 1e-12, atol = dtype == kFloat32 ? 1e-5 : 1e-14;
    for (int64_t classes : {1, 10, 1000, 1025, 5000}) {
      for (int64_t rows : {int64_t{1}, int64_t{64}, testing::gpu_size(700, 67)}) {
        for (int64_t ignore_index : {int64_t{-100}, int64_t{0}}) {
          Tensor target = targets_for(rows, classes, ignore_index, seed++);
          for (double smoothing : {0.0, 0.1}) {
            for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
              CrossEntropyOptions options;
              options.reduction = reduction;
              options.ignore_index = ignore_index;
              options.label_smoothing = smoothing;
              Tensor x = uniform({rows, classes}, dtype, seed++, -8.0, 8.0);
              Tensor xc = x.clone().requires_grad_(true), xg = gpu(x).requires_grad_(true);
              Tensor lc = cross_entropy(xc, target, options);
              Tensor lg = cross_entropy(xg, gpu(target), options);
              const std::string what = "cross_entropy " + shape_str({rows, classes}) + " " + dtype_name(dtype) +
                                       " ignore " + std::to_string(ignore_index) + " smoothing " +
                                       std::to_string(smoothing) + " reduction " +
                                       std::to_string(static_cast<int>(reduction));
              expect_parity(lc, lg, rtol, atol, what);
              if (reduction == Reduction::None) {
                Tensor w = uniform({rows}, dtype, seed++);
                lc.backward(w);
                lg.backward(gpu(w));
              } else {
                lc.backward();
                lg.backward();
              }
              expect_parity(xc.grad(), xg.grad(), 10 * rtol, atol, what + " backward");
            }
          }
        }
      }
    }
  }
}

TEST(CudaCrossEntropyParity, LargeLogitsAndUnbatched) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform({50, 300}, kFloat32, 500, -3000.0, 3000.0);
  Tensor target = targets_for(50, 300, -100, 501);
  expect_parity(cross_entropy(x, target, {Reduction::None}), cross_entropy(gpu(x), gpu(target), {Reduction::None}),
                2e-5, 1e-3, "cross_entropy large logits");
  Tensor row = uniform({17}, kFloat64, 502);
  Tensor t = full({}, 3.0, TensorOptions(kInt64));  // a 0-d target for the unbatched input
  expect_parity(cross_entropy(row, t), cross_entropy(gpu(row), gpu(t)), 1e-12, 0.0, "cross_entropy unbatched");
}

// ---------------------------------------------------------------------------------------------
// index_select, index_add, gather, scatter_add, embedding
// ---------------------------------------------------------------------------------------------

// An index into a dim of size `extent` with repeats: 0, 2, 2, 1, 0, extent - 1 (clamped).
Tensor repeated_index(int64_t extent) {
  std::vector<int64_t> v;
  for (int64_t i : {0, 2, 2, 1, 0, 100}) v.push_back(std::min(i, extent - 1));
  return indices(v, {static_cast<int64_t>(v.size())});
}

TEST(CudaIndexingParity, IndexSelectAndIndexAddOverEachDim) {
  SKIP_WITHOUT_GPU();
  const Shape shape = {5, 6, 7};
  uint64_t seed = 600;
  for (DType dtype : {kFloat32, kFloat64, kInt32, kInt64}) {
    const bool floating = dtype == kFloat32 || dtype == kFloat64;
    for (int64_t d = 0; d < 3; ++d) {
      const std::string what = std::string(dtype_name(dtype)) + " dim " + std::to_string(d);
      Tensor idx = repeated_index(shape[d]);
      Tensor x = floating ? uniform(shape, dtype, seed++) : small_integers(shape, dtype, seed++);
      expect_equal(index_select(x, d, idx), index_select(gpu(x), d, gpu(idx)), what + " index_select");
      // A non-contiguous input.
      Tensor xt = x.transpose(0, 2), idx_t = repeated_index(xt.size(d));
      expect_equal(index_select(xt, d, idx_t), index_select(gpu(x).transpose(0, 2), d, gpu(idx_t)),
                   what + " index_select transposed");
      Shape src_shape = shape;
      src_shape[d] = idx.numel();
      Tensor src = floating ? uniform(src_shape, dtype, seed++) : small_integers(src_shape, dtype, seed++);
      expect_parity(index_add(x, d, idx, src), index_add(gpu(x), d, gpu(idx), gpu(src)), 1e-6, 1e-6,
                    what + " index_add");
      if (floating) {
        Tensor xc = x.clone().requires_grad_(true), xg = gpu(x).requires_grad_(true);
        Tensor w = uniform(src_shape, dtype, seed++);
        index_select(xc, d, idx).backward(w);
        index_select(xg, d, gpu(idx)).backward(gpu(w));
        expect_parity(xc.grad(), xg.grad(), 1e-6, 1e-6, what + " index_select backward");
      }
    }
  }
}

TEST(CudaIndexingParity, GatherAndScatterAddOverEachDim) {
  SKIP_WITHOUT_GPU();
  const Shape shape = {5, 6, 7};
  uint64_t seed = 700;
  for (DType dtype : {kFloat32, kFloat64, kInt32, kInt64}) {
    const bool floating = dtype == kFloat32 || dtype == kFloat64;
    for (int64_t d = 0; d < 3; ++d) {
      const std::string what = std::string(dtype_name(dtype)) + " dim " + std::to_string(d);
      Shape index_shape = shape;
      index_shape[d] = 9;  // more picks than the dim holds: repeats for sure
      Generator g(seed++);
      Tensor idx = randint(0, shape[d], index_shape, TensorOptions(kInt64), &g);
      Tensor x = floating ? uniform(shape, dtype, seed++) : small_integers(shape, dtype, seed++);
      expect_equal(gather(x, d, idx), gather(gpu(x), d, gpu(idx)), what + " gather");
      expect_equal(gather(x.transpose(0, 2).contiguous().transpose(0, 2), d, idx),
                   gather(gpu(x).transpose(0, 2).contiguous().transpose(0, 2), d, gpu(idx)),
                   what + " gather non-contiguous");
      Tensor src = floating ? uniform(index_shape, dtype, seed++) : small_integers(index_shape, dtype, seed++);
      expect_parity(scatter_add(x, d, idx, src), scatter_add(gpu(x), d, gpu(idx), gpu(src)), 1e-6, 1e-6,
                    what + " scatter_add");
      if (floating) {
        Tensor xc = x.clone().requires_grad_(true), xg = gpu(x).requires_grad_(true);
        Tensor w = uniform(index_shape, dtype, seed++);
        gather(xc, d, idx).backward(w);
        gather(xg, d, gpu(idx)).backward(gpu(w));
        expect_parity(xc.grad(), xg.grad(), 1e-6, 1e-6, what + " gather backward");
      }
    }
  }
}

TEST(CudaIndexingParity, EmbeddingForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  for (const Shape& table : {Shape{50, 16}, Shape{100000, 64}}) {
    Generator g(800);
    Tensor ids = randint(0, table[0] / 10 + 1, {200, 9}, TensorOptions(kInt64), &g);  // many repeats
    Tensor weight = uniform(table, kFloat32, 801);
    Tensor wc = weight.clone().requires_grad_(true), wg = gpu(weight).requires_grad_(true);
    Tensor ec = embedding(wc, ids), eg = embedding(wg, gpu(ids));
    expect_equal(ec, eg, "embedding " + shape_str(table));
    Tensor w = uniform(ec.sizes(), kFloat32, 802);
    ec.backward(w);
    eg.backward(gpu(w));
    expect_parity(wc.grad(), wg.grad(), 1e-5, 1e-5, "embedding backward " + shape_str(table));
  }
}

TEST(CudaIndexingParity, LargeAndEmpty) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform({1000, 1000}, kFloat32, 900);
  Generator g(901);
  Tensor idx = randint(0, 1000, {1000, 1000}, TensorOptions(kInt64), &g);
  Tensor src = uniform({1000, 1000}, kFloat32, 902);
  for (int64_t d : {0, 1}) {
    expect_parity(scatter_add(x, d, idx, src), scatter_add(gpu(x), d, gpu(idx), gpu(src)), 1e-5, 1e-5,
                  "scatter_add large dim " + std::to_string(d));
    expect_equal(gather(x, d, idx), gather(gpu(x), d, gpu(idx)), "gather large dim " + std::to_string(d));
  }
  Tensor none = tensor<int64_t>(std::vector<int64_t>{}, Shape{0});
  expect_equal(index_select(x, 0, none), index_select(gpu(x), 0, gpu(none)), "index_select empty index");
  expect_equal(index_add(x, 1, none, zeros({1000, 0}, kFloat32)),
               index_add(gpu(x), 1, gpu(none), gpu(zeros({1000, 0}, kFloat32))), "index_add empty index");
}

}  // namespace
}  // namespace tapegrad
