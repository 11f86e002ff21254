// End-to-end smoke tests: a tiny model trains on the CPU with the public API.
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;

TEST(Smoke, LinearRegressionLossFalls) {
  manual_seed(0);
  Tensor x = randn({64, 3});
  Tensor true_w = tensor<float>({2.0f, -1.0f, 0.5f}, {3, 1});
  Tensor y = matmul(x, true_w) + 0.3;
  Tensor w = zeros({3, 1}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor loss = mse_loss(matmul(x, w) + b, y);
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
    b.sub_(b.grad() * 0.1);
    w.set_grad({});
    b.set_grad({});
  }
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 1e-4);
  expect_close(w.reshape({3}), {2.0, -1.0, 0.5}, 1e-2);
}

TEST(Smoke, ClassifierWithCrossEntropy) {
  manual_seed(1);
  Tensor x = randn({128, 4});
  Tensor labels = argmax(x, 1);  // learnable: the class is the largest feature
  Tensor w1 = (randn({16, 4}) * 0.5).requires_grad_();
  Tensor b1 = zeros({16}).requires_grad_();
  Tensor w2 = (randn({4, 16}) * 0.5).requires_grad_();
  Tensor b2 = zeros({4}).requires_grad_();
  double last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor logits = linear(relu(linear(x, w1, b1)), w2, b2);
    Tensor loss = cross_entropy(logits, labels);
    last = loss.item();
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor* p : {&w1, &b1, &w2, &b2}) {
      p->sub_(p->grad() * 0.5);
      p->set_grad({});
    }
  }
  EXPECT_LT(last, 0.2);
}

}  // namespace
}  // namespace tapegrad
