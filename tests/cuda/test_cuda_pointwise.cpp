// CPU/CUDA parity of the pointwise family (copy, fill, arange, the Philox draws, unary and its
// backward, binary and its backward, compare, where, clamp) through the public ops, over contiguous,
// transposed, strided, misaligned and broadcast operands, odd and large sizes, and empty tensors.
// Every case skips where no GPU is present.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/random_values.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_parity;
using testing::kExact;
using testing::Tol;
using testing::values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<DType> kAllDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

bool is_half(DType dt) {
  return dt == kFloat16 || dt == kBFloat16;
}
bool is_int(DType dt) {
  return dt == kInt32 || dt == kInt64;
}

// Math through libm on the CPU and CUDA's math library on the GPU: a few ulps apart.
Tol math_tol(DType dt) {
  switch (dt) {
    case kFloat32:
      return {1e-5, 1e-6};
    case kFloat64:
      return {1e-12, 1e-12};
    case kFloat16:
      return {2e-3, 1e-5};  // one f16 ulp: results are rounded from float on both sides
    case kBFloat16:
      return {1.6e-2, 1e-5};  // one bf16 ulp
    default:
      return kExact;
  }
}

// Uniform values on [lo, hi) as a CPU tensor of dtype dt (f64 draws converted; ints truncate).
Tensor uniform_cpu(const Shape& shape, DType dt, uint64_t seed, double lo, double hi) {
  Tensor x = testing::uniform(shape, kFloat64, seed, lo, hi);
  if (dt == kBool) return gt(x, (lo + hi) / 2);
  return x.to(dt);
}

// ---------------------------------------------------------------------------------------------
// Layouts: the same view taken of a CPU tensor and of its CUDA copy.
// ---------------------------------------------------------------------------------------------

struct Layout {
  const char* name;
  std::function<Shape(const Shape&)> base_shape;  // storage to draw for a target [m, n]
  std::function<Tensor(const Tensor&, const Shape&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"contiguous", [](const Shape& s) { return s; }, [](const Tensor& b, const Shape&) { return b; }},
      {"transposed",
       [](const Shape& s) {
         return Shape{s[1], s[0]};
       },
       [](const Tensor& b, const Shape&) { return b.t(); }},
      {"strided",
       [](const Shape& s) {
         return Shape{s[0], 2 * s[1]};
       },
       [](const Tensor& b, const Shape& s) { return b.slice(1, 0, 2 * s[1], 2); }},
      // Contiguous, but one element into its storage: defeats the aligned vector path.
      {"misaligned", [](const Shape& s) { return Shape{s[0] * s[1] + 1}; },
       [](const Tensor& b, const Shape& s) { return b.narrow(0, 1, s[0] * s[1]).view(s); }},
      {"broadcast_row",
       [](const Shape& s) {
         return Shape{1, s[1]};
       },
       [](const Tensor& b, const Shape& s) { return b.expand(s); }},
      {"broadcast_scalar", [](const Shape&) { return Shape{}; },
       [](const Tensor& b, const Shape& s) { return b.expand(s); }},
  };
  return all;
}

const Layout& layout(const std::string& name) {
  for (const Layout& l : layouts())
    if (name == l.name) return l;
  throw std::runtime_error("no layout " + name);
}

// The rows of the large 2-D shape [rows, 1021]: a million elements span more blocks than one launch
// of the strided pointwise grid (and load a GPU); on the emulator, which runs every thread on the
// CPU, 131 rows keep it multi-block, and CudaPointwise.GridStrideSizes covers the grid-stride loop.
int64_t large_rows() {
  return testing::gpu_size(1031, 131);
}

// Odd sizes (1, 3, 1023, 2^20 + 7) and a large 2-D one, as [m, n]. The large ones run for the
// layouts that take different kernel paths (vectorised, strided 2-D, strided 1-D) and stay out of
// the others, where they would add time, not coverage.
const std::vector<Shape> kSmallShapes = {{1, 1}, {1, 3}, {3, 341}};
// The large shapes span many blocks (and, on a GPU, load it); the emulator keeps them multi-block.
const std::vector<Shape>& all_shapes() {
  static const std::vector<Shape> shapes = {
      {1, 1}, {1, 3}, {3, 341}, {1, testing::gpu_size((1 << 20) + 7, (1 << 16) + 7)}, {large_rows(), 1021}};
  return shapes;
}
const std::vector<Shape>& shapes_for(const std::string& layout_name) {
  bool big = layout_name == "contiguous" || layout_name == "transposed" || layout_name == "misaligned";
  return big ? all_shapes() : kSmallShapes;
}

// One operand on both devices: the CPU view and the same view of the CUDA copy of its storage.
struct Pair {
  Tensor cpu, cuda;
};

Pair operand(const Layout& l, const Shape& shape, DType dt, uint64_t seed, double lo, double hi) {
  Tensor base = uniform_cpu(l.base_shape(shape), dt, seed, lo, hi);
  return {l.view(base, shape), l.view(base.to(kCUDA), shape)};
}

std::string label(const std::string& op, const Layout& l, const Shape& shape) {
  return op + " [" + l.name + " " + shape_str(shape) + "]";
}

// Runs f on both devices. Half inputs compute on the CPU in float32 (the CPU only stores 16-bit
// floats), and that reference is rounded back to the half type.
void check_op(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Pair>& inputs, Tol tol,
              const std::string& what) {
  std::vector<Tensor> on_cpu, on_cuda;
  bool half = false;
  DType half_type = kFloat16;
  for (const Pair& p : inputs) {
    if (is_half(p.cpu.dtype())) {
      half = true;
      half_type = p.cpu.dtype();
      on_cpu.push_back(p.cpu.to(kFloat32));
    } else {
      on_cpu.push_back(p.cpu);
    }
    on_cuda.push_back(p.cuda);
  }
  Tensor want = f(on_cpu);
  if (half && want.dtype() == kFloat32) want = want.to(half_type);
  expect_parity(f(on_cuda), want, tol, what);
}

// ---------------------------------------------------------------------------------------------
// copy
// ---------------------------------------------------------------------------------------------

TEST(CudaCopy, EveryDtypePairAndLayout) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"contiguous", "transposed", "strided", "misaligned", "broadcast_row"}) {
    const Layout& l = layout(name);
    for (const Shape& shape : {Shape{1, 1}, Shape{1, 3}, Shape{3, 341}}) {
      for (DType from : kAllDtypes) {
        // Values in range for every dtype; fractional, negative, zero.
        Pair x = operand(l, shape, from, 11, -300.0, 300.0);
        for (DType to : kAllDtypes) {
          std::ostringstream what;
          what << label("copy", l, shape) << " " << from << " -> " << to;
          expect_parity(x.cuda.to(to), x.cpu.to(to), kExact, what.str());
        }
        expect_parity(x.cuda.contiguous(), x.cpu.contiguous(), kExact, label("contiguous", l, shape));
        expect_parity(x.cuda.clone(), x.cpu.clone(), kExact, label("clone", l, shape));
      }
    }
  }
}

TEST(CudaCopy, SpecialFloatValues) {
  SKIP_WITHOUT_GPU();
  std::vector<double> special = {0.0, -0.0, kInf, -kInf, kNaN, 1e-40, 65504.0, 65520.0, 1e30, -1e-8, 3.0e38};
  Tensor x = tensor<double>(special);
  for (DType from : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor src = x.to(from);
    for (DType to : {kFloat32, kFloat64, kFloat16, kBFloat16, kBool}) {
      std::ostringstream what;
      what << "special copy " << from << " -> " << to;
      expect_parity(src.to(kCUDA).to(to), src.to(to), kExact, what.str());
    }
  }
}

TEST(CudaCopy, LargeTensors) {
  SKIP_WITHOUT_GPU();
  for (const Shape& shape : {Shape{1, (1 << 20) + 7}, Shape{large_rows(), 1021}, Shape{1, (1 << 22) + 3}}) {
    for (const char* name : {"contiguous", "transposed", "misaligned"}) {
      const Layout& l = layout(name);
      Pair x = operand(l, shape, kFloat32, 3, -2.0, 2.0);
      expect_parity(x.cuda.to(kFloat16), x.cpu.to(kFloat16), kExact, label("copy f32 -> f16", l, shape));
      expect_parity(x.cuda.to(kFloat64), x.cpu.to(kFloat64), kExact, label("copy f32 -> f64", l, shape));
      expect_parity(x.cuda.contiguous(), x.cpu.contiguous(), kExact, label("contiguous", l, shape));
    }
  }
}

TEST(CudaCopy, IntoNonContiguousDestinationsAndJoins) {
  SKIP_WITHOUT_GPU();
  Tensor src = uniform_cpu({7, 5}, kFloat64, 5, -1, 1);
  Tensor dst_cpu = zeros({5, 7}, kFloat32).t(), dst_cuda = zeros({5, 7}, TensorOptions(kFloat32).device(kCUDA)).t();
  dst_cpu.copy_(src);
  dst_cuda.copy_(src.to(kCUDA));
  expect_parity(dst_cuda, dst_cpu, kExact, "copy_ into a transposed f32 view");
  // Broadcast source into strided columns.
  Tensor row = uniform_cpu({1, 3}, kInt64, 6, -50, 50);
  Tensor wide_cpu = zeros({4, 6}, kInt32), wide_cuda = zeros({4, 6}, TensorOptions(kInt32).device(kCUDA));
  wide_cpu.slice(1, 0, 6, 2).copy_(row);
  wide_cuda.slice(1, 0, 6, 2).copy_(row.to(kCUDA));
  expect_parity(wide_cuda, wide_cpu, kExact, "copy_ of a broadcast row into every other column");

  Tensor a = uniform_cpu({3, 4}, kFloat32, 7, -1, 1), b = uniform_cpu({4, 3}, kFloat32, 8, -1, 1).t();
  expect_parity(cat({a.to(kCUDA), b.to(kCUDA)}, 0), cat({a, b}, 0), kExact, "cat dim 0");
  expect_parity(cat({a.to(kCUDA), b.to(kCUDA)}, 1), cat({a, b}, 1), kExact, "cat dim 1");
  expect_parity(stack({a.to(kCUDA), b.to(kCUDA)}, 1), stack({a, b}, 1), kExact, "stack dim 1");
}

// ---------------------------------------------------------------------------------------------
// fill and arange
// ---------------------------------------------------------------------------------------------

TEST(CudaFill, EveryDtypeAndStridedViews) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllDtypes) {
    for (double value : {0.0, 1.0, -2.5, 1234.0, 0.1}) {
      for (const Shape& shape : {Shape{1}, Shape{3}, Shape{1023}, Shape{(1 << 20) + 7}}) {
        std::ostringstream what;
        what << "full " << value;
        expect_parity(full(shape, value, TensorOptions(dt).device(kCUDA)), full(shape, value, TensorOptions(dt)),
                      kExact, what.str());
      }
      // Transposed and every-other-column views: only the viewed elements change.
      Tensor base_cpu = uniform_cpu({6, 10}, dt, 9, -5, 5), base_cuda = base_cpu.to(kCUDA);
      base_cpu.t().fill_(value);
      base_cuda.t().fill_(value);
      expect_parity(base_cuda, base_cpu, kExact, "fill_ transposed");
      base_cpu.slice(1, 1, 10, 3).fill_(value + 1);
      base_cuda.slice(1, 1, 10, 3).fill_(value + 1);
      expect_parity(base_cuda, base_cpu, kExact, "fill_ strided columns");
      base_cpu.narrow(0, 1, 1).zero_();
      base_cuda.narrow(0, 1, 1).zero_();
      expect_parity(base_cuda, base_cpu, kExact, "zero_ one row");
    }
  }
  Tensor nan_cpu = full({5}, kNaN, kFloat32), nan_cuda = full({5}, kNaN, TensorOptions(kFloat32).device(kCUDA));
  expect_parity(nan_cuda, nan_cpu, kExact, "full NaN");
}

TEST(CudaArange, BitIdenticalToTheCpu) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64}) {
    for (double end : {1.0, 3.0, 1023.0, static_cast<double>((1 << 20) + 7)}) {
      expect_parity(arange(0, end, 1, TensorOptions(dt).device(kCUDA)), arange(0, end, 1, TensorOptions(dt)), kExact,
                    "arange 0..end");
    }
    expect_parity(arange(-3.5, 7.2, 0.37, TensorOptions(dt).device(kCUDA)), arange(-3.5, 7.2, 0.37, TensorOptions(dt)),
                  kExact, "arange fractional step");
    expect_parity(arange(10, -10, -0.3, TensorOptions(dt).device(kCUDA)), arange(10, -10, -0.3, TensorOptions(dt)),
                  kExact, "arange negative step");
    expect_parity(linspace(-1, 1, 1001, TensorOptions(dt).device(kCUDA)), linspace(-1, 1, 1001, TensorOptions(dt)),
                  kExact, "linspace");
  }
}

// ---------------------------------------------------------------------------------------------
// Philox draws: one seed, the same numbers on both devices.
// ---------------------------------------------------------------------------------------------

TEST(CudaRandom, UniformAndRandintAreBitIdentical) {
  SKIP_WITHOUT_GPU();
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, (uint64_t{1} << 40) + 7}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1023}, int64_t{(1 << 20) + 7}}) {
      for (DType dt : {kFloat32, kFloat64}) {
        Generator g_cpu(seed), g_cuda(seed);
        expect_parity(rand({n}, TensorOptions(dt).device(kCUDA), &g_cuda), rand({n}, dt, &g_cpu), kExact, "rand");
        // A second draw continues from the advanced offset on both.
        Tensor u_cpu = empty({n}, dt), u_cuda = empty({n}, TensorOptions(dt).device(kCUDA));
        uniform_(u_cpu, -3.0, 0.5, &g_cpu);
        uniform_(u_cuda, -3.0, 0.5, &g_cuda);
        expect_parity(u_cuda, u_cpu, kExact, "uniform_ second draw");
        EXPECT_EQ(g_cpu.offset(), g_cuda.offset());
      }
      for (DType dt : {kInt32, kInt64, kFloat32, kFloat64}) {
        Generator g_cpu(seed), g_cuda(seed);
        expect_parity(randint(-7, 1000, {n}, TensorOptions(dt).device(kCUDA), &g_cuda),
                      randint(-7, 1000, {n}, dt, &g_cpu), kExact, "randint");
      }
      Generator g_cpu(seed), g_cuda(seed);
      expect_parity(randint(-(int64_t{1} << 40), int64_t{1} << 41, {n}, TensorOptions(kInt64).device(kCUDA), &g_cuda),
                    randint(-(int64_t{1} << 40), int64_t{1} << 41, {n}, kInt64, &g_cpu), kExact, "randint wide range");
    }
  }
}

TEST(CudaRandom, NormalMatchesToLibmPrecision) {
  SKIP_WITHOUT_GPU();
  for (uint64_t seed : {uint64_t{1}, uint64_t{123456789}}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1023}, int64_t{(1 << 20) + 7}}) {
      for (DType dt : {kFloat32, kFloat64}) {
        Generator g_cpu(seed), g_cuda(seed);
        expect_parity(randn({n}, TensorOptions(dt).device(kCUDA), &g_cuda), randn({n}, dt, &g_cpu), {1e-6, 1e-6},
                      "randn");
        Tensor x_cpu = empty({n}, dt), x_cuda = empty({n}, TensorOptions(dt).device(kCUDA));
        normal_(x_cpu, 2.0, 0.5, &g_cpu);
        normal_(x_cuda, 2.0, 0.5, &g_cuda);
        expect_parity(x_cuda, x_cpu, {1e-6, 1e-6}, "normal_ mean 2 std 0.5");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// unary and its backward
// ---------------------------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;  // input range (log, sqrt and rsqrt need positive inputs)
  bool integers;  // defined on int32/int64 too
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> all = {
      {"neg", [](const Tensor& x) { return neg(x); }, -3, 3, true},
      {"abs", [](const Tensor& x) { return abs(x); }, -3, 3, true},
      {"exp", [](const Tensor& x) { return exp(x); }, -3, 3, false},
      {"log", [](const Tensor& x) { return log(x); }, 0.05, 4, false},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.05, 4, false},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.05, 4, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -3, 3, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -6, 6, false},
      {"relu", [](const Tensor& x) { return relu(x); }, -3, 3, true},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -4, 4, false},
      {"square", [](const Tensor& x) { return square(x); }, -3, 3, true},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, -3, 3, false},
      {"softplus", [](const Tensor& x) { return softplus(x); }, -25, 25, false},  // both sides of the threshold
      {"softplus_beta_threshold", [](const Tensor& x) { return softplus(x, 2.0, 3.0); }, -3, 3, false},
      {"elu", [](const Tensor& x) { return elu(x, 0.7); }, -4, 3, false},
  };
  return all;
}

TEST(CudaUnary, EveryOpLayoutAndSize) {
  SKIP_WITHOUT_GPU();
  for (const UnaryCase& c : unary_cases()) {
    for (const Layout& l : layouts()) {
      for (const Shape& shape : shapes_for(l.name)) {
        for (DType dt : {kFloat32, kFloat64}) {
          check_op([&](const std::vector<Tensor>& in) { return c.fn(in[0]); }, {operand(l, shape, dt, 21, c.lo, c.hi)},
                   math_tol(dt), label(c.name, l, shape));
        }
      }
    }
  }
}

TEST(CudaUnary, HalfTypesComputeInFloat) {
  SKIP_WITHOUT_GPU();
  for (const UnaryCase& c : unary_cases()) {
    for (const char* name : {"contiguous", "transposed", "misaligned"}) {
      for (const Shape& shape : {Shape{1, 3}, Shape{3, 341}, Shape{large_rows(), 1021}}) {
        for (DType dt : {kFloat16, kBFloat16}) {
          check_op([&](const std::vector<Tensor>& in) { return c.fn(in[0]); },
                   {operand(layout(name), shape, dt, 22, c.lo, c.hi)}, math_tol(dt),
                   label(c.name, layout(name), shape));
        }
      }
    }
  }
}

TEST(CudaUnary, IntegerOpsAndIntegerPromotion) {
  SKIP_WITHOUT_GPU();
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {kInt32, kInt64}) {
      // Ops without an integer form promote to float32 first, on both devices.
      Tol tol = c.integers ? kExact : math_tol(kFloat32);
      for (const char* name : {"contiguous", "transposed", "broadcast_row"}) {
        check_op([&](const std::vector<Tensor>& in) { return c.fn(in[0]); },
                 {operand(layout(name), {3, 341}, dt, 23, c.lo < 0 ? -1000 : 1, 1000)}, tol,
                 label(c.name, layout(name), {3, 341}));
      }
    }
  }
}

TEST(CudaUnary, NanAndInfinity) {
  SKIP_WITHOUT_GPU();
  Tensor x = tensor<double>({kNaN, kInf, -kInf, 0.0, -0.0, 1e-300, 700.0, -700.0});
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      Tensor in = x.to(dt);
      expect_parity(c.fn(in.to(kCUDA)), c.fn(in), math_tol(dt), std::string(c.name) + " of special values");
    }
  }
}

// grad_x = g * f'(x) through the tape; x is a transposed view of a leaf so the kernel also sees a
// non-contiguous input, and the incoming gradient is a broadcast scalar for one of the passes.
TEST(CudaUnary, BackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      for (const Shape& shape : {Shape{1, 3}, Shape{37, 29}, Shape{large_rows(), 1021}}) {
        Tensor base = uniform_cpu({shape[1], shape[0]}, dt, 31, c.lo, c.hi);
        Tensor g = uniform_cpu(shape, dt, 32, -1, 1);
        Tensor leaf_cpu = base.clone().requires_grad_(true);
        Tensor leaf_cuda = base.to(kCUDA).requires_grad_(true);
        c.fn(leaf_cpu.t()).backward(g);
        c.fn(leaf_cuda.t()).backward(g.to(kCUDA));
        ASSERT_TRUE(leaf_cuda.grad().defined()) << c.name;
        expect_parity(leaf_cuda.grad(), leaf_cpu.grad(), math_tol(dt), std::string(c.name) + " backward");
      }
      // A broadcast incoming gradient (stride 0 everywhere).
      Tensor base = uniform_cpu({3, 341}, dt, 33, c.lo, c.hi);
      Tensor leaf_cpu = base.clone().requires_grad_(true), leaf_cuda = base.to(kCUDA).requires_grad_(true);
      c.fn(leaf_cpu).backward(full({}, 0.75, dt).expand({3, 341}));
      c.fn(leaf_cuda).backward(full({}, 0.75, TensorOptions(dt).device(kCUDA)).expand({3, 341}));
      expect_parity(leaf_cuda.grad(), leaf_cpu.grad(), math_tol(dt), std::string(c.name) + " backward, broadcast grad");
    }
  }
}

TEST(CudaUnary, HalfBackward) {
  SKIP_WITHOUT_GPU();
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {kFloat16, kBFloat16}) {
      Tensor base = uniform_cpu({41, 23}, kFloat32, 34, c.lo, c.hi).to(dt);
      Tensor g = uniform_cpu({41, 23}, kFloat32, 35, -1, 1).to(dt);
      Tensor leaf_cpu = base.to(kFloat32).requires_grad_(true);
      Tensor leaf_cuda = base.to(kCUDA).requires_grad_(true);
      c.fn(leaf_cpu).backward(g.to(kFloat32));
      c.fn(leaf_cuda).backward(g.to(kCUDA));
      // The CUDA kernel rounds y to the half type before the backward reads it: a few half ulps.
      Tol tol = math_tol(dt);
      tol.rtol *= 4;
      tol.atol = dt == kFloat16 ? 2e-3 : 1.6e-2;
      expect_parity(leaf_cuda.grad(), leaf_cpu.grad().to(dt), tol, std::string(c.name) + " half backward");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// binary and its backward
// ---------------------------------------------------------------------------------------------

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double a_lo, a_hi, b_lo, b_hi;
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> all = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, -3, 3, -3, 3},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, -3, 3, -3, 3},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, -3, 3, -3, 3},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, -3, 3, 0.5, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.2, 3, -2, 3},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -3, 3, -3, 3},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -3, 3, -3, 3},
  };
  return all;
}

// (layout of a, layout of b) pairs: every layout appears on both sides.
const std::vector<std::pair<const char*, const char*>> kLayoutPairs = {
    {"contiguous", "contiguous"},   {"transposed", "broadcast_row"}, {"strided", "broadcast_scalar"},
    {"misaligned", "contiguous"},   {"broadcast_row", "transposed"}, {"contiguous", "misaligned"},
    {"broadcast_scalar", "strided"}};

TEST(CudaBinary, EveryOpLayoutAndSize) {
  SKIP_WITHOUT_GPU();
  for (const BinaryCase& c : binary_cases()) {
    for (auto [la, lb] : kLayoutPairs) {
      // Large sizes for the pairs whose first layout is one of the three kernel paths.
      for (const Shape& shape : shapes_for(la)) {
        for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
          Pair a = operand(layout(la), shape, dt, 41, c.a_lo, c.a_hi);
          Pair b = operand(layout(lb), shape, dt, 42, c.b_lo, c.b_hi);
          check_op([&](const std::vector<Tensor>& in) { return c.fn(in[0], in[1]); }, {a, b}, math_tol(dt),
                   std::string(c.name) + " " + la + "/" + lb + " " + shape_str(shape));
        }
      }
    }
  }
}

TEST(CudaBinary, IntegersIncludingPowAndTrueDivision) {
  SKIP_WITHOUT_GPU();
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {kInt32, kInt64}) {
      for (auto [la, lb] : kLayoutPairs) {
        bool is_pow = std::string(c.name) == "pow";
        // Integer pow: small bases, exponents from -2 (truncates to 0 or +-1) to 9; div is true division.
        Pair a = operand(layout(la), {3, 341}, dt, 43, is_pow ? -4 : -1000, is_pow ? 5 : 1000);
        Pair b = operand(layout(lb), {3, 341}, dt, 44, is_pow ? -2 : 1, is_pow ? 10 : 1000);
        Tol tol = std::string(c.name) == "div" ? math_tol(kFloat32) : kExact;
        check_op([&](const std::vector<Tensor>& in) { return c.fn(in[0], in[1]); }, {a, b}, tol,
                 std::string(c.name) + " " + la + "/" + lb);
      }
    }
  }
  // 3^39 is exact (beyond double's 2^53), 3^41 wraps the same way on both devices.
  Tensor base = tensor<int64_t>({3, 3, -3, 2, 0, 1, -1, 7}),
         exponent = tensor<int64_t>({39, 41, 33, 62, 0, -5, -3, -1});
  expect_parity(pow(base.to(kCUDA), exponent.to(kCUDA)), pow(base, exponent), kExact, "int64 pow edge cases");
}

TEST(CudaBinary, NanPropagation) {
  SKIP_WITHOUT_GPU();
  Tensor a = tensor<double>({kNaN, 1.0, kNaN, kInf, -kInf, 0.0, 2.0});
  Tensor b = tensor<double>({1.0, kNaN, kNaN, 1.0, kInf, 0.0, -0.5});
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      expect_parity(c.fn(a.to(kCUDA, dt), b.to(kCUDA, dt)), c.fn(a.to(dt), b.to(dt)), math_tol(dt),
                    std::string(c.name) + " with NaN and infinities");
    }
  }
}

TEST(CudaBinary, InPlaceWritesIntoTheFirstOperand) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"contiguous", "transposed", "strided", "misaligned"}) {
    for (const Shape& shape : {Shape{1, 3}, Shape{3, 341}, Shape{large_rows(), 1021}}) {
      for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kFloat16}) {
        Pair self = operand(layout(name), shape, dt, 51, -3, 3);
        Pair other = operand(layout("broadcast_row"), shape, dt, 52, 1, 3);
        // The CPU reference on float32 for half types (the CPU stores but does not compute them).
        Tensor ref = is_half(dt) ? self.cpu.to(kFloat32) : self.cpu;
        Tensor ref_other = is_half(dt) ? other.cpu.to(kFloat32) : other.cpu;
        ref.add_(ref_other);
        ref.mul_(ref_other);
        ref.sub_(2.0);
        self.cuda.add_(other.cuda);
        self.cuda.mul_(other.cuda);
        self.cuda.sub_(2.0);
        if (!is_int(dt)) {
          ref.div_(ref_other);
          self.cuda.div_(other.cuda);
        }
        Tensor want = is_half(dt) ? ref.to(dt) : ref;
        // Half: four ops, each rounded to the half type on the GPU only (and sub_ can cancel).
        Tol tol = is_half(dt) ? Tol{8e-3, 2e-2} : math_tol(dt);
        expect_parity(self.cuda, want, tol, label("in-place add_/mul_/sub_/div_", layout(name), shape));
      }
    }
  }
}

TEST(CudaBinary, BackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      for (bool broadcast_b : {false, true}) {
        Shape a_shape{37, 29}, b_shape = broadcast_b ? Shape{1, 29} : Shape{37, 29};
        Tensor a = uniform_cpu(a_shape, dt, 61, c.a_lo, c.a_hi), b = uniform_cpu(b_shape, dt, 62, c.b_lo, c.b_hi);
        if (std::string(c.name) == "maximum" || std::string(c.name) == "minimum") {
          a.narrow(0, 0, 1).copy_(b.narrow(0, 0, 1));  // ties split the gradient
        }
        Tensor g = uniform_cpu(a_shape, dt, 63, -1, 1);
        Tensor a_cpu = a.clone().requires_grad_(true), b_cpu = b.clone().requires_grad_(true);
        Tensor a_cuda = a.to(kCUDA).requires_grad_(true), b_cuda = b.to(kCUDA).requires_grad_(true);
        c.fn(a_cpu, b_cpu).backward(g);
        c.fn(a_cuda, b_cuda).backward(g.to(kCUDA));
        std::string what = std::string(c.name) + (broadcast_b ? " backward, broadcast b" : " backward");
        expect_parity(a_cuda.grad(), a_cpu.grad(), math_tol(dt), what + " (a)");
        expect_parity(b_cuda.grad(), b_cpu.grad(), {math_tol(dt).rtol * 10, math_tol(dt).atol * 100}, what + " (b)");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// compare, where, clamp
// ---------------------------------------------------------------------------------------------

using CompareFn = Tensor (*)(const Tensor&, const Tensor&);
const std::vector<std::pair<const char*, CompareFn>> kCompares = {
    {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
    {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
    {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
    {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
    {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
    {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};

// Few distinct values, so equal pairs are common; a NaN in every floating operand.
Pair coarse_pair(const Layout& l, const Shape& shape, DType dt, uint64_t seed) {
  Tensor base = uniform_cpu(l.base_shape(shape), kFloat64, seed, -3, 3);
  Tensor rounded = div(base.to(kInt64).to(kFloat64), 2.0);  // multiples of 0.5 in [-1.5, 1.5]
  if (is_floating_point(dt) && rounded.numel() > 1) rounded.view({-1}).narrow(0, 0, 1).fill_(kNaN);
  Tensor typed = dt == kBool ? gt(rounded, 0.0) : rounded.to(dt);
  return {l.view(typed, shape), l.view(typed.to(kCUDA), shape)};
}

TEST(CudaCompare, EveryOpDtypeAndLayout) {
  SKIP_WITHOUT_GPU();
  for (auto [name, fn] : kCompares) {
    for (DType dt : kAllDtypes) {
      for (size_t p = 0; p < kLayoutPairs.size(); ++p) {
        auto [la, lb] = kLayoutPairs[p];
        // The large shape for two pairs only: the rest add time, not coverage.
        for (const Shape& shape : p < 2 ? std::vector<Shape>{{1, 1}, {3, 341}, {large_rows(), 1021}}
                                        : std::vector<Shape>{{1, 1}, {3, 341}}) {
          Pair a = coarse_pair(layout(la), shape, dt, 71), b = coarse_pair(layout(lb), shape, dt, 72);
          Tensor want = fn(is_half(dt) ? a.cpu.to(kFloat32) : a.cpu, is_half(dt) ? b.cpu.to(kFloat32) : b.cpu);
          std::ostringstream what;
          what << name << " " << dt << " " << la << "/" << lb << " " << shape_str(shape);
          expect_parity(fn(a.cuda, b.cuda), want, kExact, what.str());
        }
      }
    }
  }
}

TEST(CudaWhere, EveryDtypeWithBroadcastCondition) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kAllDtypes) {
    for (const Shape& shape : {Shape{1, 1}, Shape{1, 3}, Shape{3, 341}, Shape{large_rows(), 1021}}) {
      for (auto [lc, la, lb] : std::vector<std::tuple<const char*, const char*, const char*>>{
               {"contiguous", "contiguous", "contiguous"},
               {"broadcast_row", "transposed", "strided"},
               {"transposed", "broadcast_scalar", "misaligned"},
               {"strided", "misaligned", "broadcast_row"}}) {
        Pair c = operand(layout(lc), shape, kBool, 81, 0, 1);
        Pair a = operand(layout(la), shape, dt, 82, -50, 50), b = operand(layout(lb), shape, dt, 83, -50, 50);
        // where moves values without arithmetic: the CPU reference for half types is exact too.
        Tensor want = where(c.cpu, is_half(dt) ? a.cpu.to(kFloat32) : a.cpu, is_half(dt) ? b.cpu.to(kFloat32) : b.cpu);
        if (is_half(dt)) want = want.to(dt);
        std::ostringstream what;
        what << "where " << dt << " " << lc << "/" << la << "/" << lb << " " << shape_str(shape);
        expect_parity(where(c.cuda, a.cuda, b.cuda), want, kExact, what.str());
      }
    }
  }
}

TEST(CudaWhere, BackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor cond = uniform_cpu({23, 17}, kBool, 84, 0, 1);
  Tensor a = uniform_cpu({23, 17}, kFloat64, 85, -1, 1), b = uniform_cpu({23, 17}, kFloat64, 86, -1, 1);
  Tensor g = uniform_cpu({23, 17}, kFloat64, 87, -1, 1);
  Tensor a_cpu = a.clone().requires_grad_(true), b_cpu = b.clone().requires_grad_(true);
  Tensor a_cuda = a.to(kCUDA).requires_grad_(true), b_cuda = b.to(kCUDA).requires_grad_(true);
  where(cond, a_cpu, b_cpu).backward(g);
  where(cond.to(kCUDA), a_cuda, b_cuda).backward(g.to(kCUDA));
  expect_parity(a_cuda.grad(), a_cpu.grad(), kExact, "where backward (a)");
  expect_parity(b_cuda.grad(), b_cpu.grad(), kExact, "where backward (b)");
}

TEST(CudaClamp, NumericDtypesNanAndInPlace) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<double, double>> bounds = {
      {-1.0, 1.0}, {-kInf, 0.5}, {0.25, kInf}, {2.0, 2.0}, {-0.7, 100.0}};
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kFloat16, kBFloat16}) {
    for (const char* name : {"contiguous", "transposed", "strided", "misaligned", "broadcast_row"}) {
      for (const Shape& shape : {Shape{1, 1}, Shape{3, 341}, Shape{large_rows(), 1021}}) {
        Pair x = coarse_pair(layout(name), shape, dt, 91);
        for (auto [lo, hi] : bounds) {
          Tensor want = clamp(is_half(dt) ? x.cpu.to(kFloat32) : x.cpu, lo, hi);
          if (is_half(dt)) want = want.to(dt);
          std::ostringstream what;
          what << "clamp [" << lo << ", " << hi << "] " << dt << " " << name << " " << shape_str(shape);
          expect_parity(clamp(x.cuda, lo, hi), want, kExact, what.str());
        }
      }
    }
    // In place, on a transposed view of a bigger tensor.
    Tensor base_cpu = uniform_cpu({40, 30}, dt, 92, -3, 3), base_cuda = base_cpu.to(kCUDA);
    Tensor ref = is_half(dt) ? base_cpu.to(kFloat32) : base_cpu.clone();
    ref.t().clamp_(-1.0, 1.5);
    base_cuda.t().clamp_(-1.0, 1.5);
    expect_parity(base_cuda, is_half(dt) ? ref.to(dt) : ref, kExact, "clamp_ in place");
  }
}

TEST(CudaClamp, BackwardMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  Tensor x = uniform_cpu({31, 19}, kFloat32, 93, -2, 2), g = uniform_cpu({31, 19}, kFloat32, 94, -1, 1);
  Tensor x_cpu = x.clone().requires_grad_(true), x_cuda = x.to(kCUDA).requires_grad_(true);
  clamp(x_cpu, -1, 1).backward(g);
  clamp(x_cuda, -1, 1).backward(g.to(kCUDA));
  expect_parity(x_cuda.grad(), x_cpu.grad(), kExact, "clamp backward");
}

// ---------------------------------------------------------------------------------------------
// Empty tensors and grid-stride sizes
// ---------------------------------------------------------------------------------------------

TEST(CudaPointwise, EmptyTensorsLaunchNothing) {
  SKIP_WITHOUT_GPU();
  TensorOptions f32 = TensorOptions(kFloat32).device(kCUDA);
  Tensor e = empty({0, 3}, f32), other = ones({0, 3}, f32);
  EXPECT_EQ(full({0, 3}, 1.0, f32).numel(), 0);
  EXPECT_EQ(exp(e).numel(), 0);
  EXPECT_EQ(add(e, other).numel(), 0);
  EXPECT_EQ(add(e, ones({3}, f32)).sizes(), (Shape{0, 3}));
  EXPECT_EQ(lt(e, other).dtype(), kBool);
  EXPECT_EQ(where(lt(e, other), e, other).numel(), 0);
  EXPECT_EQ(clamp(e, -1, 1).numel(), 0);
  EXPECT_EQ(e.to(kFloat16).numel(), 0);
  EXPECT_EQ(e.t().contiguous().numel(), 0);
  EXPECT_EQ(arange(0, 0, 1, f32).numel(), 0);
  EXPECT_EQ(rand({0}, f32).numel(), 0);
  EXPECT_EQ(randn({0, 5}, f32).numel(), 0);
  EXPECT_EQ(randint(0, 3, {0}, TensorOptions(kInt64).device(kCUDA)).numel(), 0);
  e.fill_(2.0);
  e.add_(other);
  Tensor leaf = empty({0, 3}, f32).requires_grad_(true);
  tanh(leaf).backward(empty({0, 3}, f32));
  EXPECT_EQ(leaf.grad().numel(), 0);
}

TEST(CudaPointwise, GridStrideSizes) {
  SKIP_WITHOUT_GPU();
  // More elements than one launch of the pointwise grid covers, contiguous (vectorised) and strided.
  const Shape big{1, (1 << 22) + 3};
  for (DType dt : {kFloat32, kFloat64, kFloat16}) {
    for (const char* name : {"contiguous", "misaligned", "strided"}) {
      Pair a = operand(layout(name), big, dt, 101, -2, 2), b = operand(layout("contiguous"), big, dt, 102, 0.5, 2);
      check_op([](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {a, b}, math_tol(dt),
               label("big div", layout(name), big));
      check_op([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {a}, math_tol(dt),
               label("big tanh", layout(name), big));
    }
  }
  Tensor big_t = uniform_cpu({2049, 2051}, kFloat32, 103, -1, 1);
  expect_parity(big_t.to(kCUDA).t().contiguous(), big_t.t().contiguous(), kExact, "big transposed copy");
  Generator g_cpu(5), g_cuda(5);
  expect_parity(rand({(1 << 22) + 3}, TensorOptions(kFloat32).device(kCUDA), &g_cuda),
                rand({(1 << 22) + 3}, kFloat32, &g_cpu), kExact, "big rand");
}

}  // namespace
}  // namespace tapegrad
