// Autograd engine semantics (leaves, accumulation, retain_graph, views, in-place, grad mode, threads), checked against
// PyTorch's behaviour.
#include <cmath>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "support/test_util.h"
#include "tapegrad/autograd/node.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;
using testing::values;

Tensor leaf_of(const std::vector<double>& v, const Shape& shape = {}) {
  return tensor<double>(v, shape).requires_grad_();
}

// ---------------------------------------------------------------------------------------------
// requires_grad, leaves and grad_fn
// ---------------------------------------------------------------------------------------------

TEST(Autograd, RequiresGradPropagates) {
  Tensor x = leaf_of({1, 2, 3});
  Tensor c = tensor<double>({4, 5, 6});
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE((x * c).requires_grad());
  EXPECT_TRUE((c + x).requires_grad());
  EXPECT_TRUE(x.exp().requires_grad());
  EXPECT_TRUE(x.sum().requires_grad());
  EXPECT_TRUE(x.t().requires_grad());
  EXPECT_FALSE((c * c).requires_grad());
  EXPECT_FALSE(c.exp().sum().requires_grad());
  // Comparisons, integer conversions and index outputs are not differentiable.
  EXPECT_FALSE(gt(x, c).requires_grad());
  EXPECT_FALSE(x.to(kInt64).requires_grad());
  EXPECT_TRUE(x.to(kFloat32).requires_grad());
}

TEST(Autograd, LeavesAndNonLeaves) {
  Tensor x = leaf_of({1, 2});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  Tensor plain = tensor<double>({1, 2});
  EXPECT_TRUE(plain.is_leaf());
  EXPECT_EQ(plain.grad_fn(), nullptr);
  Tensor y = x * 2;
  EXPECT_FALSE(y.is_leaf());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_FALSE(y.grad_fn()->name().empty());
  // An op on tensors that need no grad gives a leaf.
  EXPECT_TRUE((plain * 2).is_leaf());
  // Views of a leaf requiring grad are non-leaves (they have a grad_fn).
  EXPECT_FALSE(x.narrow(0, 0, 1).is_leaf());
}

TEST(Autograd, OnlyFloatingPointTensorsCanRequireGrad) {
  expect_error([] { arange(3).requires_grad_(); }, {"requires_grad_", "int64"});
  expect_error([] { zeros({2}, kBool).requires_grad_(); }, {"requires_grad_"});
  EXPECT_NO_THROW(arange(3).requires_grad_(false));
  EXPECT_NO_THROW(zeros({2}).requires_grad_());
}

TEST(Autograd, RequiresGradFalseOnNonLeafThrows) {
  Tensor x = leaf_of({1, 2});
  Tensor y = x * 3;
  expect_error([&] { y.requires_grad_(false); }, {"requires_grad_", "non-leaf", "detach"});
  EXPECT_TRUE(y.requires_grad());
  // Turning it off on a leaf is fine.
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
}

TEST(Autograd, BackwardOnTensorWithoutGradThrows) {
  Tensor c = tensor<double>({1, 2});
  expect_error([&] { c.sum().backward(); }, {"backward", "require"});
  Tensor x = leaf_of({1, 2});
  expect_error([&] { (x * 2).backward(); }, {"backward", "[2]"});
  expect_error([&] { (x * 2).backward(tensor<double>({1, 2, 3})); }, {"backward", "[3]"});
}

// ---------------------------------------------------------------------------------------------
// Accumulation and retain_graph
// ---------------------------------------------------------------------------------------------

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf_of({1, 2, 3});
  Tensor loss = (x * x).sum();
  EXPECT_FALSE(x.grad().defined());
  loss.backward(Tensor(), /*retain_graph=*/true);
  expect_close(x.grad(), {2, 4, 6});
  loss.backward();
  expect_close(x.grad(), {4, 8, 12});
  // A new graph adds to the existing grad as well.
  (x * 10).sum().backward();
  expect_close(x.grad(), {14, 18, 22});
  x.set_grad({});
  EXPECT_FALSE(x.grad().defined());
  (x * 10).sum().backward();
  expect_close(x.grad(), {10, 10, 10});
}

TEST(Autograd, SetGradValidatesShapeAndDtype) {
  Tensor x = leaf_of({1, 2});
  x.set_grad(tensor<double>({5, 6}));
  expect_close(x.grad(), {5, 6});
  (x * 1).sum().backward();
  expect_close(x.grad(), {6, 7});
  expect_error([&] { x.set_grad(tensor<double>({1, 2, 3})); }, {"set_grad"});
  expect_error([&] { x.set_grad(tensor<float>({1, 2})); }, {"set_grad"});
}

TEST(Autograd, SecondBackwardThroughFreedGraphThrows) {
  Tensor x = leaf_of({1, 2});
  Tensor loss = (x * x).sum();
  loss.backward();
  expect_close(x.grad(), {2, 4});
  expect_error([&] { loss.backward(); }, {"retain_graph"});
}

TEST(Autograd, RetainGraphAllowsRepeatedBackward) {
  Tensor x = leaf_of({1, 2});
  Tensor loss = (x.exp() * x).sum();
  for (int i = 0; i < 3; ++i) loss.backward(Tensor(), true);
  // d/dx x e^x = (x + 1) e^x, three times.
  expect_close(x.grad(), {3 * 2 * std::exp(1.0), 3 * 3 * std::exp(2.0)}, 1e-9);
  loss.backward();  // the last one may free the graph
  expect_error([&] { loss.backward(); }, {"retain_graph"});
}

TEST(Autograd, ExplicitGradientForNonScalarOutput) {
  Tensor x = leaf_of({1, 2, 3});
  Tensor y = x * x;
  y.backward(tensor<double>({1, 0.5, -2}));
  expect_close(x.grad(), {2, 2, -12});
  // A gradient of another floating dtype is converted.
  Tensor z = leaf_of({1, 2});
  (z * 3).backward(tensor<float>({1, 2}));
  expect_close(z.grad(), {3, 6});
  EXPECT_EQ(z.grad().dtype(), kFloat64);
}

TEST(Autograd, MultiRootBackward) {
  Tensor x = leaf_of({1, 2, 3});
  Tensor a = x * 2;
  Tensor b = x * x;
  autograd::backward({a, b}, {tensor<double>({1, 1, 1}), tensor<double>({1, 0, 2})});
  // 2 * ga + 2x * gb
  expect_close(x.grad(), {2 + 2, 2 + 0, 2 + 12});

  // Roots that depend on each other, and an implicit gradient for a scalar root.
  Tensor w = leaf_of({2});
  Tensor u = w * 3;          // du/dw = 3
  Tensor v = (u * u).sum();  // dv/dw = 2u * 3 = 36
  autograd::backward({v, u}, {Tensor(), tensor<double>({1})});
  expect_close(w.grad(), {36 + 3});
  expect_error([&] { autograd::backward({x.sum()}, {Tensor(), Tensor()}); }, {"backward"});
}

TEST(Autograd, SameRootTwiceAccumulatesBothGradients) {
  // torch.autograd.backward([y, y], [g1, g2]) gives x.grad = dy/dx * (g1 + g2).
  Tensor x = leaf_of({1, 2});
  Tensor y = x * 2;
  autograd::backward({y, y}, {tensor<double>({1, 1}), tensor<double>({10, 100})});
  ASSERT_TRUE(x.grad().defined()) << "no gradient reached the leaf";
  expect_close(x.grad(), {22, 202});
}

TEST(Autograd, RootsSharingOneNode) {
  // Two different tensors whose gradients meet in one node (each is also a root).
  Tensor x = leaf_of({1, 2});
  Tensor h = x * 3;
  Tensor a = h.sum();
  Tensor b = h.sum();
  autograd::backward({a, b});
  ASSERT_TRUE(x.grad().defined());
  expect_close(x.grad(), {6, 6});
}

TEST(Autograd, BackwardFromALeaf) {
  Tensor x = leaf_of({1, 2});
  x.backward(tensor<double>({3, 4}));
  expect_close(x.grad(), {3, 4});
  Tensor s = leaf_of({5});
  s.backward();
  expect_close(s.grad(), {1});
}

TEST(Autograd, GradientsKeepTheLeafDtype) {
  Tensor x = tensor<float>({1, 2}).requires_grad_();
  Tensor y = (x.to(kFloat64) * tensor<double>({3, 4})).sum();
  EXPECT_EQ(y.dtype(), kFloat64);
  y.backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  expect_close(x.grad(), {3, 4});
  // Mixed-precision binary op: f32 leaf times f64 constant promotes to f64; the grad is f32.
  Tensor z = tensor<float>({1, 2}).requires_grad_();
  (z * tensor<double>({0.5, 0.25})).sum().backward();
  EXPECT_EQ(z.grad().dtype(), kFloat32);
  expect_close(z.grad(), {0.5, 0.25});
}

TEST(Autograd, SharedSubgraphIsFreedByTheFirstBackward) {
  // As in PyTorch: two losses sharing h; the first backward frees h's node.
  Tensor x = leaf_of({1, 2});
  Tensor h = x * x;
  Tensor a = h.sum();
  Tensor b = (h * 2).sum();
  a.backward();
  expect_error([&] { b.backward(); }, {"retain_graph"});
  // With retain_graph on the first, both work and accumulate.
  Tensor x2 = leaf_of({1, 2});
  Tensor h2 = x2 * x2;
  h2.sum().backward(Tensor(), true);
  (h2 * 2).sum().backward();
  expect_close(x2.grad(), {2 + 4, 4 + 8});
}

// ---------------------------------------------------------------------------------------------
// Graph shapes
// ---------------------------------------------------------------------------------------------

TEST(Autograd, DiamondGraphSumsGradients) {
  Tensor x = leaf_of({-1, 0.5, 2});
  Tensor y = x * x + 3 * x;
  y.sum().backward();
  expect_close(x.grad(), {2 * -1.0 + 3, 2 * 0.5 + 3, 2 * 2.0 + 3});
}

TEST(Autograd, TensorUsedByTwoBranchesWithDifferentOps) {
  Tensor x = leaf_of({-0.5, 0.25, 1.5});
  Tensor h = x * 2;  // a non-leaf shared by both branches
  Tensor loss = h.exp().sum() + h.tanh().sum() + (h * x).sum();
  loss.backward();
  std::vector<double> xv = {-0.5, 0.25, 1.5};
  std::vector<double> want;
  for (double v : xv) {
    double hv = 2 * v;
    double t = std::tanh(hv);
    want.push_back(2 * std::exp(hv) + 2 * (1 - t * t) + 4 * v);  // d/dx of 2x*x is 4x
  }
  expect_close(x.grad(), want, 1e-9);
}

TEST(Autograd, UnusedInputGetsNoGradient) {
  Tensor x = leaf_of({1, 2});
  Tensor unused = leaf_of({3, 4});
  (x * 2).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Autograd, SameTensorAsBothOperands) {
  Tensor x = leaf_of({3});
  (x * x * x).sum().backward();  // 3x^2
  expect_close(x.grad(), {27});
  Tensor y = leaf_of({2, 5});
  (y + y).sum().backward();
  expect_close(y.grad(), {2, 2});
}

// ---------------------------------------------------------------------------------------------
// Grad mode
// ---------------------------------------------------------------------------------------------

TEST(GradMode, NoGradGuardStopsRecording) {
  Tensor x = leaf_of({1, 2});
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * 2;
    EXPECT_FALSE(autograd::grad_enabled());
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_TRUE((x * 2).requires_grad());
}

TEST(GradMode, GuardsNestAndRestoreThePreviousMode) {
  ASSERT_TRUE(autograd::grad_enabled());
  {
    NoGradGuard outer;
    EXPECT_FALSE(autograd::grad_enabled());
    {
      NoGradGuard inner;
      EXPECT_FALSE(autograd::grad_enabled());
    }
    EXPECT_FALSE(autograd::grad_enabled()) << "the inner guard must restore 'off', not 'on'";
    autograd::set_grad_enabled(true);
    {
      NoGradGuard inner;
      EXPECT_FALSE(autograd::grad_enabled());
    }
    EXPECT_TRUE(autograd::grad_enabled());
  }
  EXPECT_TRUE(autograd::grad_enabled());
  autograd::set_grad_enabled(false);
  {
    NoGradGuard g;
    EXPECT_FALSE(autograd::grad_enabled());
  }
  EXPECT_FALSE(autograd::grad_enabled());
  autograd::set_grad_enabled(true);
}

TEST(GradMode, GradModeIsThreadLocal) {
  // While this thread is inside a NoGradGuard, another thread still records.
  NoGradGuard no_grad;
  bool other_enabled = false, other_records = false;
  std::thread worker([&] {
    other_enabled = autograd::grad_enabled();
    Tensor x = leaf_of({1, 2});
    other_records = (x * 2).requires_grad();
  });
  worker.join();
  EXPECT_TRUE(other_enabled);
  EXPECT_TRUE(other_records);
  EXPECT_FALSE(autograd::grad_enabled());
}

// ---------------------------------------------------------------------------------------------
// detach and retain_grad
// ---------------------------------------------------------------------------------------------

TEST(Autograd, DetachSharesStorageButCutsTheGraph) {
  Tensor x = leaf_of({1, 2});
  Tensor y = x * 3;
  Tensor d = y.detach();
  EXPECT_EQ(d.storage().get(), y.storage().get());
  EXPECT_EQ(d.data_ptr(), y.data_ptr());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.grad_fn(), nullptr);
  Tensor z = (d * x).sum();  // only the direct use of x carries gradient
  z.backward();
  expect_close(x.grad(), {3, 6});
  // A write to the detached tensor is seen by the original.
  d.fill_(0);
  expect_close(y, {0, 0});
  // Detaching a leaf: the same memory, no grad.
  Tensor xd = x.detach();
  EXPECT_EQ(xd.data_ptr(), x.data_ptr());
  EXPECT_FALSE(xd.requires_grad());
}

TEST(Autograd, InPlaceWriteThroughDetachedAliasIsDetected) {
  // PyTorch shares the version counter between a tensor and its detach(): modifying the alias
  // makes a backward that needs the original fail.
  Tensor x = leaf_of({0.5, 1});
  Tensor y = x.exp();  // exp saves its result
  y.detach().mul_(2.0);
  expect_error([&] { y.sum().backward(); }, {"in-place"});
}

TEST(Autograd, RetainGradOnNonLeaf) {
  Tensor x = leaf_of({1, 2});
  Tensor h = x * 3;
  Tensor other = x + 1;
  h.retain_grad();
  Tensor loss = (h * h).sum() + other.sum();
  loss.backward();
  ASSERT_TRUE(h.grad().defined());
  expect_close(h.grad(), {6, 12});  // 2h
  EXPECT_FALSE(other.grad().defined()) << "a non-leaf without retain_grad keeps no grad";
  expect_close(x.grad(), {18 + 1, 36 + 1});
  // retain_grad on a leaf is a no-op; on a tensor without grad it is an error.
  EXPECT_NO_THROW(x.retain_grad());
  expect_error([] { tensor<double>({1}).retain_grad(); }, {"retain_grad"});
}

TEST(Autograd, RetainedGradAccumulatesLikeALeaf) {
  Tensor x = leaf_of({1, 2});
  Tensor h = x * 2;
  h.retain_grad();
  Tensor loss = h.sum();
  loss.backward(Tensor(), true);
  loss.backward();
  expect_close(h.grad(), {2, 2});
  expect_close(x.grad(), {4, 4});
}

TEST(Autograd, RetainedGradFollowsInPlaceModification) {
  // Since PyTorch 2.0 the retained grad of a tensor modified in place is the gradient with respect
  // to its current (modified) value: h.grad == 2 * h_final here.
  Tensor x = leaf_of({1, 2});
  Tensor h = x * 2;
  h.retain_grad();
  h.mul_(3.0);
  (h * h).sum().backward();
  expect_close(x.grad(), {72, 144});
  ASSERT_TRUE(h.grad().defined());
  expect_close(h.grad(), {12, 24});
}

// ---------------------------------------------------------------------------------------------
// Broadcasting and views
// ---------------------------------------------------------------------------------------------

TEST(Autograd, BroadcastGradientsReduceToInputShapes) {
  Tensor a = leaf_of({1, 2, 3}, {3, 1});
  Tensor b = leaf_of({10, 20, 30, 40}, {4});
  Tensor out = a + b;
  EXPECT_EQ(out.sizes(), (Shape{3, 4}));
  out.sum().backward();
  EXPECT_EQ(a.grad().sizes(), (Shape{3, 1}));
  EXPECT_EQ(b.grad().sizes(), (Shape{4}));
  expect_close(a.grad(), {4, 4, 4});
  expect_close(b.grad(), {3, 3, 3, 3});

  a.set_grad({});
  b.set_grad({});
  (a * b).sum().backward();
  expect_close(a.grad(), {100, 100, 100});  // sum of b
  expect_close(b.grad(), {6, 6, 6, 6});     // sum of a

  // A 0-dim scalar tensor broadcast against a matrix.
  Tensor s = tensor<double>({2}, {}).reshape({}).detach().requires_grad_();
  EXPECT_EQ(s.dim(), 0);
  (s * ones({2, 3}, kFloat64)).sum().backward();
  EXPECT_EQ(s.grad().dim(), 0);
  EXPECT_EQ(s.grad().item(), 6.0);
}

TEST(Autograd, GradientThroughTranspose) {
  Tensor x = leaf_of({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = tensor<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  (x.t() * w).sum().backward();
  EXPECT_EQ(x.grad().sizes(), (Shape{2, 3}));
  expect_close(x.grad(), {1, 3, 5, 2, 4, 6});  // w^T
}

TEST(Autograd, GradientThroughNarrowSliceSelect) {
  Tensor x = leaf_of({1, 2, 3, 4, 5, 6}, {2, 3});
  (x.narrow(1, 1, 2) * 2).sum().backward();
  expect_close(x.grad(), {0, 2, 2, 0, 2, 2});

  x.set_grad({});
  (x.select(0, 1) * tensor<double>({1, 2, 3})).sum().backward();
  expect_close(x.grad(), {0, 0, 0, 1, 2, 3});

  x.set_grad({});
  x.slice(1, 0, 3, 2).sum().backward();
  expect_close(x.grad(), {1, 0, 1, 1, 0, 1});

  x.set_grad({});
  (x[0][2] * 5).backward();
  expect_close(x.grad(), {0, 0, 5, 0, 0, 0});
}

TEST(Autograd, GradientThroughExpandAndViews) {
  Tensor x = leaf_of({1, 2, 3});
  (x.expand({4, 3}) * tensor<double>({1, 2, 3, 4}, {4, 1})).sum().backward();
  expect_close(x.grad(), {10, 10, 10});

  Tensor y = leaf_of({1, 2, 3, 4, 5, 6});
  Tensor m = y.view({2, 3}).permute({1, 0}).unsqueeze(0);  // [1, 3, 2]
  (m * tensor<double>({1, 2, 3, 4, 5, 6}, {1, 3, 2})).sum().backward();
  // m[0][j][i] = y[i*3 + j] is weighted by 2j + i + 1.
  expect_close(y.grad(), {1, 3, 5, 2, 4, 6});

  Tensor z = leaf_of({1, 2, 3, 4}, {2, 2});
  std::vector<Tensor> parts = split(z, 1, 1);
  (parts[0] * 10 + parts[1]).sum().backward();
  expect_close(z.grad(), {10, 1, 10, 1});
}

// ---------------------------------------------------------------------------------------------
// In-place operations
// ---------------------------------------------------------------------------------------------

TEST(InPlace, OnNonLeafIsRecorded) {
  Tensor x = leaf_of({1, 2, 3});
  Tensor y = x * 2;
  y.add_(1);
  expect_close(y, {3, 5, 7});
  EXPECT_FALSE(y.is_leaf());
  y.sum().backward();
  expect_close(x.grad(), {2, 2, 2});

  Tensor a = leaf_of({1, 2});
  Tensor b = a * a;
  b.mul_(3.0);  // b = 3a^2
  b.sum().backward();
  expect_close(a.grad(), {6, 12});

  Tensor c = leaf_of({1, 2});
  Tensor d = c + 0;
  d *= tensor<double>({3, 4});
  d.sub_(c, 2.0);  // d = c * [3, 4] - 2c
  d.sum().backward();
  expect_close(c.grad(), {1, 2});
}

TEST(InPlace, ModifyingASavedTensorMakesBackwardThrow) {
  Tensor x = leaf_of({1, 2});
  Tensor a = x + 0;
  Tensor b = a * a;  // saves a
  a.mul_(2.0);
  expect_error([&] { b.sum().backward(); }, {"in-place"});

  // A constant saved by an op counts too.
  Tensor w = tensor<double>({3, 4});
  Tensor y = leaf_of({1, 1});
  Tensor z = (y * w).sum();
  w.add_(1.0);
  expect_error([&] { z.backward(); }, {"in-place"});
}

TEST(InPlace, ModifyingAnUnsavedTensorIsFine) {
  Tensor x = leaf_of({1, 2});
  Tensor a = x + 0;
  Tensor b = a + 1;  // add saves nothing
  a.mul_(2.0);
  b.sum().backward();
  expect_close(x.grad(), {1, 1});
}

TEST(InPlace, LeafRequiringGradThrowsButWorksUnderNoGrad) {
  Tensor x = leaf_of({1, 2});
  expect_error([&] { x.add_(1.0); }, {"add_", "leaf"});
  expect_error([&] { x.fill_(0); }, {"fill_", "leaf"});
  expect_error([&] { x.copy_(tensor<double>({5, 6})); }, {"copy_", "leaf"});
  expect_close(x, {1, 2});
  {
    NoGradGuard no_grad;
    x.add_(1.0);
    x.mul_(tensor<double>({2, 3}));
  }
  expect_close(x, {4, 9});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
  (x * x).sum().backward();
  expect_close(x.grad(), {8, 18});
}

TEST(InPlace, OnAViewOfANonLeafIsCorrectOrAnError) {
  // PyTorch records this (CopySlices); tapegrad may refuse it, but must never give a wrong gradient.
  Tensor x = leaf_of({1, 2, 3});
  Tensor h = x * 2;
  bool refused = false;
  try {
    h.narrow(0, 0, 1).mul_(3.0);
  } catch (const Error& e) {
    refused = true;
    EXPECT_NE(std::string(e.what()).find("view"), std::string::npos) << e.what();
  }
  if (!refused) {
    expect_close(h, {6, 4, 6});
    h.sum().backward();
    expect_close(x.grad(), {6, 2, 2});
  } else {
    expect_close(h, {2, 4, 6});  // the refused op changed nothing
  }
}

TEST(InPlace, CopyIntoNonLeafRoutesGradientToSource) {
  Tensor src = leaf_of({1, 2, 3});
  Tensor other = leaf_of({5, 5, 5});
  Tensor dst = other * 1;
  dst.copy_(src * 2);
  (dst * tensor<double>({1, 10, 100})).sum().backward();
  expect_close(src.grad(), {2, 20, 200});
  // The overwritten contents get no gradient.
  EXPECT_TRUE(!other.grad().defined() || values(other.grad()) == std::vector<double>({0, 0, 0}));
}

// ---------------------------------------------------------------------------------------------
// Non-differentiable outputs and memory
// ---------------------------------------------------------------------------------------------

TEST(Autograd, IndexOutputsDoNotRequireGrad) {
  Tensor x = leaf_of({1, 5, 3});
  Tensor idx = argmax(x * 2, 0, true);
  EXPECT_EQ(idx.dtype(), kInt64);
  EXPECT_FALSE(idx.requires_grad());
  EXPECT_TRUE(idx.is_leaf());
  EXPECT_FALSE(argmax(x).requires_grad());
  ValuesIndices vi = max(x.view({1, 3}), 1);
  EXPECT_TRUE(vi.values.requires_grad());
  EXPECT_FALSE(vi.indices.requires_grad());
  // The index can drive a differentiable op.
  index_select(x, 0, idx).sum().backward();
  expect_close(x.grad(), {0, 1, 0});
}

TEST(Autograd, LeafGradOutlivesTheGraph) {
  Tensor x = leaf_of({1, 2});
  {
    Tensor loss = (x * x).sum();
    loss.backward();
  }
  // The graph is gone, the leaf keeps its grad, and the tape no longer holds the leaf.
  expect_close(x.grad(), {2, 4});
  EXPECT_TRUE(x.impl()->grad_accumulator.expired());
  EXPECT_EQ(x.impl_ptr().use_count(), 1);
}

// A leaf's first gradient may be taken as its .grad rather than copied (when nothing else holds
// it), but never when the same gradient tensor also flows elsewhere: the leaves' .grad must stay
// separate tensors, and later accumulation must not leak into another leaf.
TEST(Autograd, LeafGradientsNeverShareMemory) {
  Tensor a = ones({3}).requires_grad_(), b = ones({3}).requires_grad_();
  Tensor w = full({2, 3}, 2.0).requires_grad_();
  add(add(a, b), sum(w, {0})).sum().backward();  // add passes one gradient tensor to both inputs
  EXPECT_NE(a.grad().data_ptr(), b.grad().data_ptr());
  a.grad().add_(ones({3}));
  expect_close(b.grad(), {1, 1, 1});
  expect_close(a.grad(), {2, 2, 2});
  expect_close(w.grad(), {1, 1, 1, 1, 1, 1});
  // A second backward accumulates into each .grad separately.
  add(a, b).sum().backward();
  expect_close(a.grad(), {3, 3, 3});
  expect_close(b.grad(), {2, 2, 2});
}

TEST(Autograd, SavedTensorsAreFreedAfterBackwardUnlessRetained) {
  // A constant captured by the graph lives in caller memory whose deleter tells us when it is freed.
  for (bool retain : {false, true}) {
    SCOPED_TRACE(retain ? "retain_graph=true" : "retain_graph=false");
    int freed = 0;
    Tensor x = leaf_of({1, 2});
    Tensor loss;
    {
      Tensor w = from_blob(new double[2]{3, 4}, {2}, kFloat64, kCPU, [&](void* p) {
        ++freed;
        delete[] static_cast<double*>(p);
      });
      loss = (x * w).sum();  // mul saves w for x's gradient
    }
    EXPECT_EQ(freed, 0) << "the graph still needs w";
    loss.backward(Tensor(), retain);
    expect_close(x.grad(), {3, 4});
    EXPECT_EQ(freed, retain ? 0 : 1);
    loss = Tensor();  // dropping the output drops the graph
    EXPECT_EQ(freed, 1);
  }
}

TEST(Autograd, GraphIsFreedWhenOutputIsDropped) {
  int freed = 0;
  Tensor x = leaf_of({1, 2});
  {
    Tensor w = from_blob(new double[2]{3, 4}, {2}, kFloat64, kCPU, [&](void* p) {
      ++freed;
      delete[] static_cast<double*>(p);
    });
    Tensor y = (x * w).exp().sum();
    EXPECT_FALSE(x.impl()->grad_accumulator.expired());
  }
  EXPECT_EQ(freed, 1) << "no reference cycle keeps the tape alive";
  EXPECT_TRUE(x.impl()->grad_accumulator.expired());
}

TEST(Autograd, LongChainBackpropagatesWithoutStackOverflow) {
  for (int length : {2000, 50000}) {
    SCOPED_TRACE(length);
    Tensor x = leaf_of({1, 2});
    Tensor y = x;
    for (int i = 0; i < length; ++i) y = y * 1.0001 + 0.0;
    y.sum().backward();
    double factor = std::pow(1.0001, length);
    expect_close(x.grad(), {factor, factor}, 1e-9 * factor);
  }
  // Destroying a long unreleased chain must not overflow either.
  Tensor x = leaf_of({1});
  {
    Tensor y = x;
    for (int i = 0; i < 50000; ++i) y = y + 1.0;
  }
  SUCCEED();
}

// ---------------------------------------------------------------------------------------------
// gradcheck
// ---------------------------------------------------------------------------------------------

TEST(AutogradGradcheck, PassesForACompositeFunction) {
  Tensor x = testing::leaf({2, 3}, 1);
  Tensor y = testing::leaf({2, 3}, 2);
  auto result =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return sum(tanh(in[0]) * exp(in[1])); }, {x, y});
  EXPECT_TRUE(result.ok) << result.report;
  EXPECT_LT(result.max_abs_error, 1e-6);
  EXPECT_TRUE(result.report.empty());
  // gradcheck leaves the inputs' grads clear.
  EXPECT_FALSE(x.grad().defined());

  auto broadcast =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1].t() + in[0].sum(1, true); },
                          {testing::leaf({3, 4}, 3), testing::leaf({4, 3}, 4)});
  EXPECT_TRUE(broadcast.ok) << broadcast.report;
}

TEST(AutogradGradcheck, RejectsNonFloat64Inputs) {
  Tensor x = rand({3}).requires_grad_();
  expect_error([&] { autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2; }, {x}); },
               {"gradcheck", "f64"});
  Tensor nonleaf = testing::leaf({3}) * 2;
  expect_error([&] { autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2; }, {nonleaf}); },
               {"gradcheck", "leaf"});
}

TEST(AutogradGradcheck, InputsWithoutGradAreConstants) {
  Tensor x = testing::leaf({4}, 5);
  Tensor c = rand({4}, kFloat32);  // f32 is fine when it needs no grad
  auto result =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0].sigmoid() * in[1].to(kFloat64); }, {x, c});
  EXPECT_TRUE(result.ok) << result.report;
}

// ---------------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------------

// A small two-layer model trained for a few steps; returns every gradient of every step.
std::vector<double> train_small_model(uint64_t seed) {
  Generator g(seed);
  Tensor x = randn({16, 4}, kFloat64, &g);
  Tensor target = randn({16, 2}, kFloat64, &g);
  Tensor w1 = (randn({8, 4}, kFloat64, &g) * 0.5).requires_grad_();
  Tensor b1 = zeros({8}, kFloat64).requires_grad_();
  Tensor w2 = (randn({2, 8}, kFloat64, &g) * 0.5).requires_grad_();
  std::vector<double> trace;
  for (int step = 0; step < 20; ++step) {
    Tensor h = tanh(linear(x, w1, b1));
    Tensor out = matmul(h, w2.t());
    Tensor loss = mse_loss(out, target) + (w1 * w1).sum() * 1e-3;
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor* p : {&w1, &b1, &w2}) {
      std::vector<double> g_values = values(p->grad());
      trace.insert(trace.end(), g_values.begin(), g_values.end());
      p->sub_(p->grad() * 0.1);
      p->set_grad({});
    }
    trace.push_back(loss.item());
  }
  return trace;
}

TEST(AutogradThreads, IndependentModelsTrainConcurrentlyWithIdenticalGradients) {
  const std::vector<double> alone_a = train_small_model(11);
  const std::vector<double> alone_b = train_small_model(22);
  ASSERT_NE(alone_a, alone_b);
  for (int round = 0; round < 3; ++round) {
    std::vector<double> got_a, got_b;
    std::promise<void> go;
    std::shared_future<void> start = go.get_future().share();
    std::thread ta([&] {
      start.wait();
      got_a = train_small_model(11);
    });
    std::thread tb([&] {
      start.wait();
      got_b = train_small_model(22);
    });
    go.set_value();
    ta.join();
    tb.join();
    EXPECT_EQ(got_a, alone_a) << "round " << round;
    EXPECT_EQ(got_b, alone_b) << "round " << round;
  }
}

TEST(AutogradThreads, NoGradInOneThreadDoesNotLeakIntoAnother) {
  // Thread A holds a NoGradGuard while thread B records a graph and back-propagates.
  std::promise<void> a_guarded, b_done;
  std::future<void> a_guarded_f = a_guarded.get_future(), b_done_f = b_done.get_future();
  bool a_records = true, b_records = false;
  std::vector<double> b_grad;
  std::thread ta([&] {
    NoGradGuard no_grad;
    a_guarded.set_value();
    b_done_f.wait();
    a_records = (leaf_of({1}) * 2).requires_grad();
  });
  std::thread tb([&] {
    a_guarded_f.wait();
    Tensor x = leaf_of({1, 2});
    Tensor y = (x * x).sum();
    b_records = y.requires_grad();
    if (b_records) {
      y.backward();
      b_grad = values(x.grad());
    }
    b_done.set_value();
  });
  ta.join();
  tb.join();
  EXPECT_FALSE(a_records);
  EXPECT_TRUE(b_records);
  EXPECT_EQ(b_grad, (std::vector<double>{2, 4}));
}

}  // namespace
}  // namespace tapegrad
