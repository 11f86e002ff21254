// The losses on a CUDA device: cross_entropy with a masked (-inf) logit (the fused kernel shares
// math/cross_entropy.h with the CPU), and CPU/CUDA parity of the composed losses and isclose.
// Every case skips where no GPU is present.
#include <cmath>
#include <limits>
#include <vector>

#include "support/gpu.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::values;

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor make(const std::vector<double>& v, const Shape& shape, DType dt = kFloat64) {
  return tensor<double>(v, shape, TensorOptions(dt));
}

void expect_near_all(const Tensor& cuda_result, const Tensor& cpu_result, double tol, const char* what) {
  std::vector<double> g = values(cuda_result.to(kCPU)), c = values(cpu_result);
  ASSERT_EQ(g.size(), c.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isinf(c[i])) {
      EXPECT_EQ(g[i], c[i]) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(g[i], c[i], tol * std::max(1.0, std::fabs(c[i]))) << what << " at " << i;
  }
}

TEST(CudaLosses, CrossEntropyWithAMaskedLogit) {
  SKIP_WITHOUT_GPU();
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5));
  for (DType dt : {kFloat32, kFloat64}) {
    const double tol = dt == kFloat32 ? 2e-6 : 1e-12;
    for (double e : {0.0, 0.1}) {
      Tensor z = make({1, 2, -kInf, 0.5}, {1, 4}, dt).to(kCUDA).requires_grad_(true);
      CrossEntropyOptions o;
      o.label_smoothing = e;
      Tensor loss = cross_entropy(z, tensor<int64_t>({1}, {1}).to(kCUDA), o);
      if (e == 0.0)
        EXPECT_NEAR(loss.item(), lse - 2.0, tol) << dt;
      else
        EXPECT_EQ(loss.item(), kInf) << dt;
      loss.backward();
      std::vector<double> grad = values(z.grad().to(kCPU));
      const std::vector<double> p = {std::exp(1.0 - lse), std::exp(2.0 - lse), 0.0, std::exp(0.5 - lse)};
      for (size_t c = 0; c < 4; ++c) {
        const double expected = p[c] - (c == 1 ? 1.0 - e : 0.0) - e / 4.0;
        EXPECT_NEAR(grad[c], expected, tol) << dt << " smoothing " << e << " class " << c;
      }
    }
  }
}

TEST(CudaLosses, ComposedLossesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  Generator g(3);
  Tensor x = mul(randn({5, 7}, kFloat64, &g), 4.0), y = rand({5, 7}, kFloat64, &g);
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    BCEWithLogitsOptions o, og;
    o.reduction = og.reduction = r;
    o.pos_weight = add(rand({7}, kFloat64, &g), 0.5);
    o.weight = add(rand({5, 1}, kFloat64, &g), 0.5);
    og.pos_weight = o.pos_weight.to(kCUDA);
    og.weight = o.weight.to(kCUDA);
    Tensor xg = x.to(kCUDA), yg = y.to(kCUDA);
    expect_near_all(binary_cross_entropy_with_logits(xg, yg, og), binary_cross_entropy_with_logits(x, y, o), 1e-12,
                    "bce");
    expect_near_all(l1_loss(xg, yg, r), l1_loss(x, y, r), 1e-12, "l1");
    expect_near_all(smooth_l1_loss(xg, yg, r, 0.7), smooth_l1_loss(x, y, r, 0.7), 1e-12, "smooth_l1");
    expect_near_all(huber_loss(xg, yg, r, 1.3), huber_loss(x, y, r, 1.3), 1e-12, "huber");
    CrossEntropyOptions w;
    w.reduction = r;
    w.label_smoothing = 0.2;
    w.weight = add(rand({7}, kFloat64, &g), 0.5);
    Tensor t = tensor<int64_t>({0, 6, 3, -100, 2}, {5});
    CrossEntropyOptions wg = w;
    wg.weight = w.weight.to(kCUDA);
    expect_near_all(cross_entropy(xg, t.to(kCUDA), wg), cross_entropy(x, t, w), 1e-12, "weighted cross_entropy");
  }
  // Extreme logits in float: finite on the GPU too.
  Tensor big = make({100, -100, 1e4, -1e4}, {4}, kFloat32).to(kCUDA);
  Tensor half_target = full({4}, 0.5, TensorOptions(kFloat32).device(kCUDA));
  BCEWithLogitsOptions none;
  none.reduction = Reduction::None;
  std::vector<double> got = values(binary_cross_entropy_with_logits(big, half_target, none).to(kCPU));
  const std::vector<double> expected = {50, 50, 5000, 5000};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << i;
}

TEST(CudaLosses, IsCloseMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = make({kInf, -kInf, 1.0, nan, 1.0 + 1e-6, 2.0}, {6});
  Tensor b = make({kInf, kInf, kInf, nan, 1.0, 2.1}, {6});
  for (bool equal_nan : {false, true}) {
    EXPECT_EQ(values(isclose(a.to(kCUDA), b.to(kCUDA), 1e-5, 1e-8, equal_nan).to(kCPU)),
              values(isclose(a, b, 1e-5, 1e-8, equal_nan)));
  }
  EXPECT_TRUE(allclose(a.to(kCUDA), a.to(kCUDA), 1e-5, 1e-8, true));
  EXPECT_FALSE(allclose(a.to(kCUDA), b.to(kCUDA)));
}

}  // namespace
}  // namespace tapegrad
