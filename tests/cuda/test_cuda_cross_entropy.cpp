// cross_entropy's sum and mean reduced inside its kernel (the kernel counts the rows not ignored
// and divides by that count itself; its backward divides by the same count): values and
// gradients against the formula in double on the CPU, and CUDA against the CPU over both device
// paths (the reduction inside the row kernel when its grid is one block, else a second kernel),
// ignore_index, every row ignored, class weights, and how many launches a mean costs.
#include <cmath>
#include <limits>
#include <vector>

#include "support/gpu.h"
#include "support/test_util.h"
#include "tapegrad/cuda/counters.h"

namespace tapegrad {
namespace {

using testing::values;

constexpr int64_t kIgnore = -100;

// Logits [rows, classes] in f64 and targets with every third row ignored (row 1, 4, 7, ...).
struct Batch {
  Tensor logits, target;
};
Batch make_batch(int64_t rows, int64_t classes, uint64_t seed) {
  Generator g(seed);
  Batch b;
  b.logits = mul(randn({rows, classes}, kFloat64, &g), 3.0);
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = r % 3 == 1 ? kIgnore : (r * 7 + 3) % classes;
  b.target = tensor<int64_t>(t, {rows});
  return b;
}

// PyTorch's formula in double: loss_r = lse_r - (1 - e) z_{r,t} - e / C sum_c z_{r,c} for rows
// not ignored; the mean divides the sum by their number. d mean / d z_{r,c} = (softmax - (1 - e)
// [c == t] - e / C) / counted, 0 for ignored rows.
struct Expected {
  double sum = 0;
  int64_t counted = 0;
  std::vector<double> grad_of_sum;
};
Expected formula(const Batch& b, double e) {
  const std::vector<double> z = values(b.logits);
  const std::vector<int64_t> t = b.target.tolist<int64_t>();
  const int64_t rows = b.logits.size(0), classes = b.logits.size(1);
  Expected r;
  r.grad_of_sum.assign(z.size(), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    if (t[i] == kIgnore) continue;
    const double* row = z.data() + i * classes;
    double m = row[0], total = 0, logit_sum = 0;
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, row[c]);
    for (int64_t c = 0; c < classes; ++c) total += std::exp(row[c] - m), logit_sum += row[c];
    const double lse = m + std::log(total);
    r.sum += lse - (1 - e) * row[t[i]] - e / classes * logit_sum;
    ++r.counted;
    for (int64_t c = 0; c < classes; ++c)
      r.grad_of_sum[i * classes + c] = std::exp(row[c] - lse) - (c == t[i] ? 1 - e : 0.0) - e / classes;
  }
  return r;
}

CrossEntropyOptions options(Reduction reduction, double smoothing = 0.0) {
  CrossEntropyOptions o;
  o.reduction = reduction;
  o.ignore_index = kIgnore;
  o.label_smoothing = smoothing;
  return o;
}

// The loss and the logits' gradient (the loss's gradient seeded with 1, or ones for `none`).
struct LossAndGrad {
  std::vector<double> loss, grad;
};
LossAndGrad run(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  Tensor z = logits.detach().requires_grad_(true);
  Tensor loss = cross_entropy(z, target, o);
  LossAndGrad r;
  r.loss = values(loss.to(kCPU));
  sum(loss).backward();
  r.grad = values(z.grad().to(kCPU));
  return r;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& expected, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": " << got[i];
      continue;
    }
    EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::fabs(expected[i]))) << what << " at " << i;
  }
}

TEST(CrossEntropyReduced, SumAndMeanMatchTheFormulaOnTheCpu) {
  for (double e : {0.0, 0.1}) {
    Batch b = make_batch(10, 7, 1);
    const Expected x = formula(b, e);
    ASSERT_EQ(x.counted, 7);  // a negative control on the batch itself: some rows are ignored
    for (DType dt : {kFloat64, kFloat32}) {
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      const std::string what = std::string(dtype_name(dt)) + " smoothing " + std::to_string(e);
      LossAndGrad s = run(b.logits.to(dt), b.target, options(Reduction::Sum, e));
      expect_near_all(s.loss, {x.sum}, tol, what + " sum");
      expect_near_all(s.grad, x.grad_of_sum, tol, what + " sum grad");
      LossAndGrad m = run(b.logits.to(dt), b.target, options(Reduction::Mean, e));
      expect_near_all(m.loss, {x.sum / x.counted}, tol, what + " mean");
      std::vector<double> grad_of_mean = x.grad_of_sum;
      for (double& g : grad_of_mean) g /= static_cast<double>(x.counted);
      expect_near_all(m.grad, grad_of_mean, tol, what + " mean grad");
    }
  }
}

TEST(CrossEntropyReduced, Gradcheck) {
  Batch b = make_batch(6, 5, 2);
  for (Reduction r : {Reduction::Sum, Reduction::Mean}) {
    for (double e : {0.0, 0.2}) {
      Tensor z = b.logits.detach().requires_grad_(true);
      autograd::GradcheckResult result = autograd::gradcheck(
          [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], b.target, options(r, e)); }, {z});
      EXPECT_TRUE(result.ok) << "smoothing " << e << ": " << result.report;
    }
  }
}

// PyTorch: the mean over no counted rows is 0 / 0 = NaN; the gradient is 0 (every row ignored).
TEST(CrossEntropyReduced, EveryRowIgnoredGivesANanMeanAndZeroGradient) {
  Tensor z = tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = tensor<int64_t>({kIgnore, kIgnore}, {2});
  LossAndGrad m = run(z, t, options(Reduction::Mean));
  EXPECT_TRUE(std::isnan(m.loss[0])) << m.loss[0];
  expect_near_all(m.grad, std::vector<double>(6, 0.0), 0, "grad");
  LossAndGrad s = run(z, t, options(Reduction::Sum));
  EXPECT_EQ(s.loss[0], 0.0);
  // Negative control: one row counted gives a finite mean.
  LossAndGrad one = run(z, tensor<int64_t>({kIgnore, 2}, {2}), options(Reduction::Mean));
  EXPECT_FALSE(std::isnan(one.loss[0]));
}

TEST(CrossEntropyReduced, EmptyBatch) {
  Tensor z = zeros({0, 4}, TensorOptions(kFloat64));
  Tensor t = zeros({0}, TensorOptions(kInt64));
  EXPECT_EQ(cross_entropy(z, t, options(Reduction::Sum)).item(), 0.0);
  testing::expect_error([&] { (void)cross_entropy(z, t, options(Reduction::Mean)); }, {"cross_entropy", "empty batch"});
}

// Rows and classes that reach each device path: a warp per row with the reduction in the row
// kernel (up to 8 rows: one block) or in a second kernel (more rows; 300 > one thread per row of
// the reducing block), and a block per row (more than 1024 classes: one block only for 1 row).
struct Size {
  int64_t rows, classes;
};
const Size kSizes[] = {{1, 10}, {5, 7}, {8, 3}, {9, 10}, {64, 10}, {300, 5}, {1, 1500}, {3, 1100}};

TEST(CrossEntropyReduced, CudaMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const Size& size : kSizes) {
    Batch b = make_batch(size.rows, size.classes, 7 + size.rows);
    for (DType dt : {kFloat64, kFloat32}) {
      const double tol = dt == kFloat64 ? 1e-12 : 2e-5;
      for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
        for (double e : {0.0, 0.1}) {
          const std::string what = std::to_string(size.rows) + "x" + std::to_string(size.classes) + " " +
                                   dtype_name(dt) + " reduction " + std::to_string(static_cast<int>(r)) +
                                   " smoothing " + std::to_string(e);
          Tensor z = b.logits.to(dt);
          LossAndGrad cpu = run(z, b.target, options(r, e));
          LossAndGrad gpu = run(z.to(kCUDA), b.target.to(kCUDA), options(r, e));
          expect_near_all(gpu.loss, cpu.loss, tol, what + " loss");
          expect_near_all(gpu.grad, cpu.grad, tol, what + " grad");
        }
      }
    }
  }
}

TEST(CrossEntropyReduced, CudaEveryRowIgnoredAndUnbatched) {
  SKIP_WITHOUT_GPU();
  for (int64_t rows : {2, 20}) {  // in the row kernel, and in the second kernel
    Tensor z = randn({rows, 4}, kFloat32).to(kCUDA);
    Tensor t = full({rows}, static_cast<double>(kIgnore), TensorOptions(kInt64).device(kCUDA));
    LossAndGrad m = run(z, t, options(Reduction::Mean));
    EXPECT_TRUE(std::isnan(m.loss[0])) << rows << ": " << m.loss[0];
    expect_near_all(m.grad, std::vector<double>(rows * 4, 0.0), 0, "grad");
    EXPECT_EQ(run(z, t, options(Reduction::Sum)).loss[0], 0.0);
  }
  Tensor z = tensor<double>({0.5, -1, 2}, {3});
  Tensor t = tensor<int64_t>({2}, {1}).reshape({});
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    LossAndGrad cpu = run(z, t, options(r)), gpu = run(z.to(kCUDA), t.to(kCUDA), options(r));
    EXPECT_EQ(cross_entropy(z.to(kCUDA), t.to(kCUDA), options(r)).dim(), 0);
    expect_near_all(gpu.loss, cpu.loss, 1e-12, "unbatched loss");
    expect_near_all(gpu.grad, cpu.grad, 1e-12, "unbatched grad");
  }
}

// Class weights take the composed path; it must still agree with the CPU, and divide by the
// total weight of the rows not ignored (0 / 0 = NaN when all are ignored).
TEST(CrossEntropyReduced, CudaWeightedMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Batch b = make_batch(12, 6, 3);
  Tensor w = tensor<double>({0.5, 1, 2, 0.25, 3, 1.5}, {6});
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    for (double e : {0.0, 0.1}) {
      CrossEntropyOptions o = options(r, e), og = o;
      o.weight = w;
      og.weight = w.to(kCUDA);
      LossAndGrad cpu = run(b.logits, b.target, o), gpu = run(b.logits.to(kCUDA), b.target.to(kCUDA), og);
      expect_near_all(gpu.loss, cpu.loss, 1e-12, "weighted loss");
      expect_near_all(gpu.grad, cpu.grad, 1e-12, "weighted grad");
    }
  }
  CrossEntropyOptions og = options(Reduction::Mean);
  og.weight = w.to(kCUDA);
  Tensor all_ignored = full({12}, static_cast<double>(kIgnore), TensorOptions(kInt64).device(kCUDA));
  EXPECT_TRUE(std::isnan(cross_entropy(b.logits.to(kCUDA), all_ignored, og).item()));
}

// What a mean costs on the device: one launch forward when the rows fit one block (two when
// they do not), one backward, nothing for the count, and no host synchronisation.
TEST(CrossEntropyReduced, CudaMeanLaunches) {
  SKIP_WITHOUT_GPU();
  for (const Size& size : {Size{4, 10}, Size{64, 10}}) {
    Batch b = make_batch(size.rows, size.classes, 5);
    Tensor z = b.logits.to(kFloat32).to(kCUDA).requires_grad_(true);
    Tensor t = b.target.to(kCUDA);
    const cuda::Counters before = cuda::counters();
    Tensor loss = cross_entropy(z, t, options(Reduction::Mean));
    const cuda::Counters forward = cuda::counters() - before;
    EXPECT_EQ(forward.launches, size.rows <= 8 ? 1u : 2u) << size.rows;
    // Without the caching allocator (the sanitizer runs) every free is a synchronising cudaFree.
    if (cuda::caching_allocator_enabled()) EXPECT_EQ(forward.host_syncs, 0u);
    Tensor seed = ones({}, TensorOptions(kFloat32).device(kCUDA));
    const cuda::Counters before_backward = cuda::counters();
    loss.backward(seed);
    const cuda::Counters backward = cuda::counters() - before_backward;
    EXPECT_EQ(backward.launches, 1u) << size.rows;
    if (cuda::caching_allocator_enabled()) EXPECT_EQ(backward.host_syncs, 0u);
    // Negative control: the mean composed by hand from the per-row losses costs launches of its own.
    const cuda::Counters before_composed = cuda::counters();
    Tensor composed = div(sum(cross_entropy(z.detach(), t, options(Reduction::None))), 7.0);
    EXPECT_GT((cuda::counters() - before_composed).launches, forward.launches);
    const double counted = sum(ne(b.target, static_cast<double>(kIgnore))).item();
    EXPECT_NEAR(composed.item(), loss.item() * counted / 7.0, 1e-5 * counted);
  }
}

}  // namespace
}  // namespace tapegrad
