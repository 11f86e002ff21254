// InferenceMode (tapegrad/autograd/grad_mode.h): no tape inside it, and the tensors made inside it
// never enter autograd afterwards: each way in is a clear error, and clone() is the way out.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "support/random_values.h"
#include "support/test_util.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

using testing::error_of;
using testing::uniform;

TEST(InferenceMode, TurnsRecordingOffAndRestoresTheOuterModes) {
  EXPECT_FALSE(InferenceMode::is_enabled());
  EXPECT_TRUE(autograd::grad_enabled());
  {
    InferenceMode guard;
    EXPECT_TRUE(InferenceMode::is_enabled());
    EXPECT_FALSE(autograd::grad_enabled());
    {
      InferenceMode off(false);  // nested off: grad mode stays as the outer scope left it
      EXPECT_FALSE(InferenceMode::is_enabled());
      EXPECT_FALSE(autograd::grad_enabled());
      EXPECT_FALSE(zeros({2}).is_inference());
    }
    EXPECT_TRUE(InferenceMode::is_enabled());
  }
  EXPECT_FALSE(InferenceMode::is_enabled());
  EXPECT_TRUE(autograd::grad_enabled());
  {
    NoGradGuard no_grad;
    { InferenceMode guard; }
    EXPECT_FALSE(autograd::grad_enabled());  // back to the NoGradGuard's mode, not to true
  }
}

TEST(InferenceMode, IsPerThread) {
  InferenceMode guard;
  bool other_enabled = true, other_grad = false, other_tensor = true;
  std::thread([&] {
    other_enabled = InferenceMode::is_enabled();
    other_grad = autograd::grad_enabled();
    other_tensor = ones({1}).is_inference();
  }).join();
  EXPECT_FALSE(other_enabled);
  EXPECT_TRUE(other_grad);
  EXPECT_FALSE(other_tensor);
}

TEST(InferenceMode, RecordsNothingAndGivesTheSameNumbers) {
  Tensor w = uniform({4, 3}, kFloat32, 1).requires_grad_();
  Tensor b = uniform({4}, kFloat32, 2).requires_grad_();
  Tensor x = uniform({5, 3}, kFloat32, 3);
  Tensor trained = relu(linear(x, w, b));
  InferenceMode guard;
  Tensor y = relu(linear(x, w, b));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_TRUE(y.is_inference());
  EXPECT_FALSE(w.is_inference());      // made outside, read as usual
  EXPECT_FALSE(w.t().is_inference());  // a view of a normal tensor is normal (as PyTorch)
  EXPECT_TRUE(y.t().is_inference());   // a view of an inference tensor is one
  EXPECT_TRUE(allclose(y, trained.detach(), 0.0, 0.0));
}

TEST(InferenceMode, AnInferenceTensorCannotEnterAutograd) {
  Tensor w = uniform({4, 3}, kFloat32, 1).requires_grad_();
  Tensor features;
  {
    InferenceMode guard;
    features = mul(uniform({5, 3}, kFloat32, 4), 2.0);
  }
  ASSERT_TRUE(features.is_inference());
  const std::string linear_error = error_of([&] { linear(features, w); });
  EXPECT_NE(linear_error.find("linear"), std::string::npos) << linear_error;
  EXPECT_NE(linear_error.find("inference tensor"), std::string::npos) << linear_error;
  EXPECT_NE(linear_error.find("clone()"), std::string::npos) << linear_error;
  Tensor p = uniform({5, 3}, kFloat32, 5).requires_grad_();
  EXPECT_NE(error_of([&] { add(features, p); }).find("add: an inference tensor"), std::string::npos);
  const std::string requires_error = error_of([&] { features.requires_grad_(); });
  EXPECT_NE(requires_error.find("requires_grad_"), std::string::npos) << requires_error;
  {
    InferenceMode guard;  // inside the mode it may (as PyTorch: a module built there has parameters)
    EXPECT_EQ(error_of([&] { features.requires_grad_(); }), "");
    features.requires_grad_(false);
  }
  // Not an error: ops that record nothing, and requires_grad_(false).
  EXPECT_EQ(error_of([&] { add(features, 1.0); }), "");
  EXPECT_EQ(error_of([&] { features.requires_grad_(false); }), "");
  // The way out (and the negative control: the same op on a normal tensor records and backprops).
  Tensor normal = features.clone();
  EXPECT_FALSE(normal.is_inference());
  sum(linear(normal, w)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(allclose(w.grad(), sum(normal, {0}, true).expand({4, 3}), 1e-6, 1e-6));
}

TEST(InferenceMode, InPlaceUpdatesOfInferenceTensorsStayInside) {
  Tensor t;
  {
    InferenceMode guard;
    t = zeros({3});
    const uint64_t before = t.storage()->version();
    t.add_(ones({3}));
    t.fill_(2.0);
    EXPECT_EQ(t.storage()->version(), before);  // no version counting inside
  }
  for (const auto& [op, update] : std::initializer_list<std::pair<std::string, std::function<void()>>>{
           {"add_", [&] { t.add_(ones({3})); }},
           {"fill_", [&] { t.fill_(1.0); }},
           {"copy_", [&] { t.copy_(ones({3})); }},
           {"clamp_", [&] { t.clamp_(0.0, 1.0); }},
           {"uniform_", [&] { uniform_(t, 0.0, 1.0); }}}) {
    const std::string error = error_of(update);
    EXPECT_NE(error.find(op + ": in-place update of an inference tensor"), std::string::npos) << op << ": " << error;
  }
  EXPECT_TRUE(allclose(t, full({3}, 2.0), 0.0, 0.0));  // nothing was written by the refused updates
  // A normal tensor updated inside InferenceMode still counts the update (a saved tensor may read it).
  Tensor normal = zeros({3});
  const uint64_t before = normal.storage()->version();
  {
    InferenceMode guard;
    normal.add_(ones({3}));
  }
  EXPECT_GT(normal.storage()->version(), before);
}

}  // namespace
}  // namespace tapegrad
