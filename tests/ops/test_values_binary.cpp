// Forward values of the binary ops (broadcasting, scalar forms, promotion), comparisons, where,
// clamp and the in-place forms, against hand loops over std::vector.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support/reference.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using namespace reference;

// ---------------------------------------------------------------------------------------------
// Binary ops, broadcasting, scalar forms
// ---------------------------------------------------------------------------------------------

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;  // the operands' range (pow needs a positive base)
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }, -2,
       2},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
       [](double a, double b) { return a + 2.5 * b; }, -2, 2},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }, -2,
       2},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -0.5); },
       [](double a, double b) { return a + 0.5 * b; }, -2, 2},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }, -2,
       2},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, 0.5,
       3},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.25, 2.5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -2, 2},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -2, 2},
      {"operator+", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; },
       -2, 2},
      {"operator-", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; },
       -2, 2},
      {"operator*", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; },
       -2, 2},
      {"operator/", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; },
       0.5, 3},
  };
}

TEST(BinaryValues, BroadcastingShapes) {
  const std::vector<std::pair<Shape, Shape>> shape_pairs = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}},       {{2, 1}, {1, 3}},    {{2, 3}, {}},
      {{}, {2, 3}},     {{}, {}},      {{4, 1, 3}, {2, 1}}, {{2, 3, 4}, {3, 1}},
  };
  uint32_t seed = 100;
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {kFloat64, kFloat32}) {
      for (const auto& [as, bs] : shape_pairs) {
        std::vector<double> av = data_for(dt, static_cast<size_t>(numel_of(as)), seed++, c.lo, c.hi);
        std::vector<double> bv = data_for(dt, static_cast<size_t>(numel_of(bs)), seed++, c.lo, c.hi);
        Tensor a = make(av, as.empty() ? Shape{1} : as, dt), b = make(bv, bs.empty() ? Shape{1} : bs, dt);
        if (as.empty()) a = a.reshape({});
        if (bs.empty()) b = b.reshape({});
        Tensor out = c.op(a, b);
        std::string what = std::string(c.name) + " " + dtype_name(dt) + " " + shape_str(as) + " with " + shape_str(bs);
        EXPECT_EQ(out.sizes(), broadcast_ref_shape(as, bs)) << what;
        EXPECT_EQ(out.dtype(), dt) << what;
        expect_values(out, binary_ref(av, as, bv, bs, c.ref), tol_for(dt), dt == kFloat32 ? 1e-6 : 1e-14, what);
      }
    }
  }
}

TEST(BinaryValues, MaximumMinimumPropagateNaN) {
  Tensor a = make({kNaN, 1.0, 2.0}, {3});
  Tensor b = make({0.0, kNaN, 3.0}, {3});
  expect_values(maximum(a, b), {kNaN, kNaN, 3.0});
  expect_values(minimum(a, b), {kNaN, kNaN, 2.0});
}

TEST(BinaryValues, ScalarForms) {
  std::vector<double> v = uniform_values(6, 7, 0.5, 2.0);
  for (DType dt : {kFloat64, kFloat32}) {
    std::vector<double> w = dt == kFloat32 ? round_f32(v) : v;
    Tensor x = make(w, {2, 3}, dt);
    double rt = tol_for(dt);
    auto check = [&](const Tensor& t, const std::function<double(double)>& f, const char* what) {
      EXPECT_EQ(t.dtype(), dt) << what;
      EXPECT_EQ(t.sizes(), (Shape{2, 3})) << what;
      expect_values(t, map_ref(w, f), rt, 1e-7, what);
    };
    check(
        add(x, 2.5), [](double a) { return a + 2.5; }, "add scalar");
    check(
        sub(x, 2.5), [](double a) { return a - 2.5; }, "sub scalar");
    check(
        mul(x, -3.0), [](double a) { return a * -3.0; }, "mul scalar");
    check(
        div(x, 4.0), [](double a) { return a / 4.0; }, "div scalar");
    check(
        pow(x, 3.0), [](double a) { return a * a * a; }, "pow 3");
    check(
        pow(x, 2.0), [](double a) { return a * a; }, "pow 2");
    check(
        pow(x, 0.5), [](double a) { return std::sqrt(a); }, "pow 0.5");
    check(
        pow(x, -1.0), [](double a) { return 1.0 / a; }, "pow -1");
    check(
        pow(2.0, x), [](double a) { return std::pow(2.0, a); }, "pow base 2");
    check(
        maximum(x, 1.0), [](double a) { return std::max(a, 1.0); }, "maximum scalar");
    check(
        minimum(x, 1.0), [](double a) { return std::min(a, 1.0); }, "minimum scalar");
    check(
        x + 1.5, [](double a) { return a + 1.5; }, "x + s");
    check(
        1.5 + x, [](double a) { return 1.5 + a; }, "s + x");
    check(
        x - 1.5, [](double a) { return a - 1.5; }, "x - s");
    check(
        1.5 - x, [](double a) { return 1.5 - a; }, "s - x");
    check(
        x * 3.0, [](double a) { return a * 3.0; }, "x * s");
    check(
        3.0 * x, [](double a) { return 3.0 * a; }, "s * x");
    check(
        x / 8.0, [](double a) { return a / 8.0; }, "x / s");
    check(
        8.0 / x, [](double a) { return 8.0 / a; }, "s / x");
    check(
        -x, [](double a) { return -a; }, "-x");
  }
}

TEST(BinaryValues, ZeroDimScalarTensors) {
  Tensor s = scalar_tensor(3.0, kFloat64);
  EXPECT_EQ(s.dim(), 0);
  Tensor t = scalar_tensor(-0.5, kFloat64);
  Tensor r = s * t + s;
  EXPECT_EQ(r.dim(), 0);
  EXPECT_DOUBLE_EQ(r.item(), 1.5);
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(s - x, {2, 1, 0, -1, -2, -3});
  expect_values(x / s, {1.0 / 3, 2.0 / 3, 1, 4.0 / 3, 5.0 / 3, 2});
}

TEST(BinaryValues, TypePromotion) {
  Tensor i64 = make_i64({1, 2, 3});
  Tensor i32 = make_i32({10, 20, 30});
  Tensor f32 = make({0.5, 0.25, -1.0}, {3}, kFloat32);
  Tensor f64 = make({0.5, 0.25, -1.0}, {3}, kFloat64);

  Tensor r1 = i64 + f32;
  EXPECT_EQ(r1.dtype(), kFloat32);
  expect_values(r1, {1.5, 2.25, 2.0});

  Tensor r2 = i32 + i64;
  EXPECT_EQ(r2.dtype(), kInt64);
  EXPECT_EQ(r2.tolist<int64_t>(), (std::vector<int64_t>{11, 22, 33}));

  Tensor r3 = div(make_i32({7, -7, 1}), make_i32({2, 2, 3}));
  EXPECT_EQ(r3.dtype(), kFloat32);
  expect_values(r3, {3.5, -3.5, 1.0 / 3.0}, 1e-7, 0);

  Tensor r4 = i64 * 2.5;
  EXPECT_EQ(r4.dtype(), kFloat32);
  expect_values(r4, {2.5, 5.0, 7.5});

  Tensor r5 = f32 * 2.0;
  EXPECT_EQ(r5.dtype(), kFloat32);
  expect_values(r5, {1.0, 0.5, -2.0});

  Tensor r6 = i64 * 2.0;  // an integral scalar keeps the integer dtype
  EXPECT_EQ(r6.dtype(), kInt64);
  EXPECT_EQ(r6.tolist<int64_t>(), (std::vector<int64_t>{2, 4, 6}));

  Tensor r7 = f32 + f64;
  EXPECT_EQ(r7.dtype(), kFloat64);
  expect_values(r7, {1.0, 0.5, -2.0});

  Tensor r8 = make_i64({7, 8}) / 2.0;  // true division even with an integral scalar
  EXPECT_EQ(r8.dtype(), kFloat32);
  expect_values(r8, {3.5, 4.0});

  Tensor r9 = i32 - i32;
  EXPECT_EQ(r9.dtype(), kInt32);
  EXPECT_EQ(r9.tolist<int32_t>(), (std::vector<int32_t>{0, 0, 0}));

  Tensor r10 = 1.0 / make_i64({2, 4});
  EXPECT_EQ(r10.dtype(), kFloat32);
  expect_values(r10, {0.5, 0.25});

  Tensor r11 = make_i32({3, 5}) + 0.5;
  EXPECT_EQ(r11.dtype(), kFloat32);
  expect_values(r11, {3.5, 5.5});

  EXPECT_EQ(promote_types(kInt32, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kFloat64, kInt64), kFloat64);
}

// A non-integral scalar with an integer tensor gives float32 (elementwise.h); infinity is not an
// integer, so int + inf must not be squeezed into int64.
TEST(BinaryValues, IntegerTensorWithInfiniteScalarIsFloat) {
  Tensor r = make_i64({1, 2}) + kInf;
  EXPECT_TRUE(is_floating_point(r.dtype())) << "got " << r.dtype();
  expect_values(r, {kInf, kInf});
  Tensor m = maximum(make_i32({1, -2}), -kInf);
  EXPECT_TRUE(is_floating_point(m.dtype())) << "got " << m.dtype();
  expect_values(m, {1.0, -2.0});
}

TEST(BinaryValues, IntegerArithmeticIsExact) {
  Tensor a = make_i64({int64_t{1} << 40, -5, 7});
  Tensor b = make_i64({3, 2, -2});
  EXPECT_EQ((a + b).tolist<int64_t>(), (std::vector<int64_t>{(int64_t{1} << 40) + 3, -3, 5}));
  EXPECT_EQ((a * b).tolist<int64_t>(), (std::vector<int64_t>{(int64_t{1} << 40) * 3, -10, -14}));
  EXPECT_EQ(maximum(a, b).tolist<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, 2, 7}));
  EXPECT_EQ(minimum(a, b).tolist<int64_t>(), (std::vector<int64_t>{3, -5, -2}));
  EXPECT_EQ(pow(make_i64({2, 3}), make_i64({10, 3})).tolist<int64_t>(), (std::vector<int64_t>{1024, 27}));
}

// ---------------------------------------------------------------------------------------------
// Comparisons, where, clamp
// ---------------------------------------------------------------------------------------------

TEST(CompareValues, AllSixWithBroadcastAndScalars) {
  std::vector<double> av = {1, 2, 3, 4, 5, 6}, bv = {2, 2, 7};
  Tensor a = make(av, {2, 3}), b = make(bv, {3});
  struct Cmp {
    const char* name;
    Tensor (*tt)(const Tensor&, const Tensor&);
    Tensor (*ts)(const Tensor&, double);
    std::function<double(double, double)> ref;
  };
  std::vector<Cmp> cmps = {
      {"eq", eq, eq, [](double x, double y) { return double(x == y); }},
      {"ne", ne, ne, [](double x, double y) { return double(x != y); }},
      {"lt", lt, lt, [](double x, double y) { return double(x < y); }},
      {"le", le, le, [](double x, double y) { return double(x <= y); }},
      {"gt", gt, gt, [](double x, double y) { return double(x > y); }},
      {"ge", ge, ge, [](double x, double y) { return double(x >= y); }},
  };
  for (const Cmp& c : cmps) {
    Tensor r = c.tt(a, b);
    EXPECT_EQ(r.dtype(), kBool) << c.name;
    EXPECT_EQ(r.sizes(), (Shape{2, 3})) << c.name;
    expect_values(r, binary_ref(av, {2, 3}, bv, {3}, c.ref), 0, 0, c.name);
    Tensor s = c.ts(a, 3.0);
    EXPECT_EQ(s.dtype(), kBool) << c.name;
    expect_values(s, map_ref(av, [&](double x) { return c.ref(x, 3.0); }), 0, 0, std::string(c.name) + " scalar");
    Tensor col = make({2, 5}, {2, 1});  // [2,1] with [1,3]
    Tensor row = make({1, 2, 5}, {1, 3});
    expect_values(c.tt(col, row), binary_ref({2, 5}, {2, 1}, {1, 2, 5}, {1, 3}, c.ref), 0, 0,
                  std::string(c.name) + " [2,1] [1,3]");
  }
}

TEST(CompareValues, MixedDtypesAndNaN) {
  Tensor i = make_i64({1, 2, 3});
  expect_values(eq(i, make({1.0, 2.5, 3.0}, {3}, kFloat32)), {1, 0, 1});
  expect_values(lt(i, 2.5), {1, 1, 0});  // the fractional scalar is not truncated to 2
  expect_values(gt(i, 2.5), {0, 0, 1});
  expect_values(eq(i, 2.0), {0, 1, 0});
  Tensor n = make({kNaN, 1.0}, {2});
  expect_values(eq(n, n), {0, 1});
  expect_values(ne(n, n), {1, 0});
  expect_values(lt(n, 5.0), {0, 1});
}

TEST(WhereValues, BroadcastAndPromotion) {
  std::vector<double> av = {-1, 2, -3, 4, -5, 6};
  Tensor a = make(av, {2, 3});
  Tensor cond = gt(a, 0.0);
  Tensor r = where(cond, a, neg(a));
  expect_values(r, {1, 2, 3, 4, 5, 6});
  // [2,3] condition, [3] and 0-dim values.
  Tensor r2 = where(cond, make({10, 20, 30}, {3}), scalar_tensor(-1.0, kFloat64));
  expect_values(r2, {-1, 20, -1, 10, -1, 30});
  // [2,1] condition with [1,3] values.
  Tensor c2 = make({1, 0}, {2, 1}).to(kBool);
  Tensor r3 = where(c2, make({1, 2, 3}, {1, 3}), make({7, 8, 9}, {1, 3}));
  EXPECT_EQ(r3.sizes(), (Shape{2, 3}));
  expect_values(r3, {1, 2, 3, 7, 8, 9});
  // int with float promotes.
  Tensor r4 = where(cond, make_i64({1, 2, 3}), make({0.5, 0.5, 0.5}, {3}, kFloat32));
  EXPECT_EQ(r4.dtype(), kFloat32);
  expect_values(r4, {0.5, 2, 0.5, 1, 0.5, 3});
  // scalar form
  expect_values(where(cond, a, 0.0), {0, 2, 0, 4, 0, 6});
}

// The scalar form follows the documented scalar rule: a fractional scalar with an integer tensor
// gives float32 instead of being truncated.
TEST(WhereValues, FractionalScalarWithIntegerTensorIsNotTruncated) {
  Tensor cond = make({1, 0}, {2}).to(kBool);
  Tensor r = where(cond, make_i64({4, 5}), 2.5);
  expect_values(r, {4.0, 2.5});
}

TEST(ClampValues, RangesNaNAndIntegers) {
  Tensor x = make({-2.0, -0.5, 0.0, 0.5, 2.0, kNaN}, {6});
  expect_values(clamp(x, -1.0, 1.0), {-1.0, -0.5, 0.0, 0.5, 1.0, kNaN});
  expect_values(clamp(x, 0.0), {0.0, 0.0, 0.0, 0.5, 2.0, kNaN});
  expect_values(clamp(x, -kInf, 0.25), {-2.0, -0.5, 0.0, 0.25, 0.25, kNaN});
  expect_values(clamp(x, 0.3, 0.3), {0.3, 0.3, 0.3, 0.3, 0.3, kNaN});
  Tensor xf = x.to(kFloat32);
  Tensor cf = clamp(xf, -1.0, 1.0);
  EXPECT_EQ(cf.dtype(), kFloat32);
  expect_values(cf, {-1.0, -0.5, 0.0, 0.5, 1.0, kNaN});
  Tensor ci = clamp(make_i64({-5, 0, 5, 10}), -1.0, 6.0);
  EXPECT_EQ(ci.dtype(), kInt64);
  EXPECT_EQ(ci.tolist<int64_t>(), (std::vector<int64_t>{-1, 0, 5, 6}));
}

// ---------------------------------------------------------------------------------------------
// In-place ops
// ---------------------------------------------------------------------------------------------

TEST(InplaceValues, ArithmeticWithTensorsAndScalars) {
  Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  x.add_(make({10, 20, 30}, {3}));  // broadcast other
  expect_values(x, {11, 22, 33, 14, 25, 36});
  x.sub_(make({1, 2}, {2, 1}), 2.0);
  expect_values(x, {9, 20, 31, 10, 21, 32});
  x.mul_(make({2, 1, 0.5}, {3}));
  expect_values(x, {18, 20, 15.5, 20, 21, 16});
  x.div_(scalar_tensor(2.0, kFloat64));
  expect_values(x, {9, 10, 7.75, 10, 10.5, 8});
  x.add_(1.0);
  x.sub_(0.5);
  x.mul_(2.0);
  x.div_(4.0);
  expect_values(x, {4.75, 5.25, 4.125, 5.25, 5.5, 4.25});
  x.add_(make({1, 1, 1}, {3}), -4.0);
  expect_values(x, {0.75, 1.25, 0.125, 1.25, 1.5, 0.25});
  x.clamp_(0.2, 1.3);
  expect_values(x, {0.75, 1.25, 0.2, 1.25, 1.3, 0.25});
  x.fill_(7.5);
  expect_values(x, std::vector<double>(6, 7.5));
  x.zero_();
  expect_values(x, std::vector<double>(6, 0.0));
  Tensor y = make({1, 2}, {2});
  y += make({1, 1}, {2});
  y *= make({3, 3}, {2});
  y -= make({1, 1}, {2});
  y /= make({5, 5}, {2});
  expect_values(y, {1.0, 1.6});
}

TEST(InplaceValues, IntegerAndFloat32Targets) {
  Tensor i = make_i64({1, 2, 3});
  i.add_(make_i32({1, 1, 1}));
  i.mul_(3.0);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.tolist<int64_t>(), (std::vector<int64_t>{6, 9, 12}));
  Tensor f = make({1, 2, 3}, {3}, kFloat32);
  f.add_(make({0.5, 0.5, 0.5}, {3}, kFloat64));  // f64 other into an f32 tensor
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_values(f, {1.5, 2.5, 3.5});
  f.mul_(make_i64({2, 2, 2}));
  expect_values(f, {3, 5, 7});
}

TEST(InplaceValues, WritesThroughViewsReachTheBase) {
  Tensor base = zeros({3, 4}, kFloat64);
  base.select(0, 1).add_(1.0);
  expect_values(base, {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0});
  base.t().select(0, 2).mul_(0.0).add_(5.0);  // column 2 through a transposed view
  expect_values(base, {0, 0, 5, 0, 1, 1, 5, 1, 0, 0, 5, 0});
  base.slice(1, 0, 4, 2).fill_(-1.0);  // columns 0 and 2
  expect_values(base, {-1, 0, -1, 0, -1, 1, -1, 1, -1, 0, -1, 0});
  base.narrow(0, 1, 2).narrow(1, 1, 2).clamp_(0.5, 0.75);
  expect_values(base, {-1, 0, -1, 0, -1, 0.75, 0.5, 1, -1, 0.5, 0.5, 0});
  base.slice(0, 0, 3, 2).zero_();  // rows 0 and 2
  expect_values(base, {0, 0, 0, 0, -1, 0.75, 0.5, 1, 0, 0, 0, 0});
  base.view({12}).slice(0, 1, 12, 3).sub_(make({1, 2, 3, 4}, {4}));  // elements 1, 4, 7, 10
  expect_values(base, {0, -1, 0, 0, -3, 0.75, 0.5, -2, 0, 0, -4, 0});
  Tensor v = base.reshape({2, 6});
  v.div_(make({2, 2, 2, 2, 2, 2}, {6}));
  expect_values(base, {0, -0.5, 0, 0, -1.5, 0.375, 0.25, -1, 0, 0, -2, 0});
}

TEST(InplaceValues, SelfAliasingOperands) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor x = make(v, {3, 3});
  x.add_(x.t());  // reads the transpose of the original, not half-updated values
  std::vector<double> want(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want[i * 3 + j] = v[i * 3 + j] + v[j * 3 + i];
  expect_values(x, want);
  Tensor y = make({1, 2, 3, 4}, {4});
  y.mul_(y);
  expect_values(y, {1, 4, 9, 16});
  Tensor z = make({1, 2, 3, 4}, {4});
  z.slice(0, 1, 4).sub_(z.slice(0, 0, 3));  // overlapping shifted views
  expect_values(z, {1, 1, 1, 1});
}

}  // namespace
}  // namespace tapegrad
