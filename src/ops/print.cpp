// PyTorch-like printing: tensor([[ 1.0000, -2.5000], ...], dtype=float64, requires_grad=true).
// Large tensors are summarised with "..." (three items each side per dim).
#include <cmath>
#include <iomanip>
#include <sstream>

#include "tapegrad/autograd/node.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad {

namespace {

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool integral = false;
  bool scientific = false;
  int width = 1;

  std::string format(double v) const {
    std::ostringstream out;
    if (integral) {
      out << static_cast<int64_t>(v);
    } else if (std::isnan(v)) {
      out << "nan";
    } else if (std::isinf(v)) {
      out << (v > 0 ? "inf" : "-inf");
    } else if (scientific) {
      out << std::scientific << std::setprecision(4) << v;
    } else {
      out << std::fixed << std::setprecision(4) << v;
    }
    return out.str();
  }
};

bool shown(int64_t i, int64_t n, bool summarise) { return !summarise || n <= 2 * kEdgeItems || i < kEdgeItems || i >= n - kEdgeItems; }

void print_dim(std::ostringstream& out, const std::vector<double>& values, const Shape& sizes, const Shape& strides,
               size_t dim, int64_t offset, const Formatter& f, bool summarise, int indent) {
  if (dim == sizes.size()) {
    std::string s = f.format(values[static_cast<size_t>(offset)]);
    out << std::string(static_cast<size_t>(std::max<int>(0, f.width - static_cast<int>(s.size()))), ' ') << s;
    return;
  }
  out << "[";
  int64_t n = sizes[dim];
  bool skipped = false;
  for (int64_t i = 0; i < n; ++i) {
    if (!shown(i, n, summarise)) {
      if (!skipped) {
        out << (dim + 1 == sizes.size() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
        skipped = true;
      }
      continue;
    }
    print_dim(out, values, sizes, strides, dim + 1, offset + i * strides[dim], f, summarise, indent + 1);
    if (i + 1 < n) {
      if (dim + 1 == sizes.size()) {
        out << ", ";
      } else {
        out << "," << std::string(sizes.size() - dim - 1, '\n') << std::string(static_cast<size_t>(indent + 1), ' ');
      }
    }
  }
  out << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> values;
  if (dtype() == kBool) {
    for (int64_t v : to(kInt64).tolist<int64_t>()) values.push_back(static_cast<double>(v));
  } else {
    values = tolist<double>();
  }
  Formatter f;
  f.integral = !is_floating_point();
  double max_abs = 0, min_abs = INFINITY;
  for (double v : values)
    if (std::isfinite(v)) {
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
    }
  f.scientific = !f.integral && (max_abs >= 1e8 || (min_abs < 1e-4 && max_abs > 0));
  bool summarise = numel() > kSummariseAbove;
  Shape logical_strides = contiguous_strides(sizes());
  for (double v : values) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));

  std::ostringstream out;
  out << "tensor(";
  if (dtype() == kBool) {
    f.integral = true;
    std::ostringstream tmp;
    print_dim(tmp, values, sizes(), logical_strides, 0, 0, f, summarise, 7);
    std::string s = tmp.str();
    // Bool values print as true/false.
    std::string replaced;
    for (char c : s) replaced += c == '1' ? std::string("true") : c == '0' ? std::string("false") : std::string(1, c);
    out << replaced;
  } else {
    print_dim(out, values, sizes(), logical_strides, 0, 0, f, summarise, 7);
  }
  if (numel() == 0) out.str("tensor([]"), out.seekp(0, std::ios_base::end);
  if (!device().is_cpu()) out << ", device='" << device() << "'";
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool) out << ", dtype=" << dtype();
  if (numel() == 0 && dim() != 1) out << ", size=" << shape_str(sizes());
  if (grad_fn()) {
    out << ", grad_fn=<" << grad_fn()->name() << ">";
  } else if (requires_grad()) {
    out << ", requires_grad=true";
  }
  out << ")";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.str(); }

}  // namespace tapegrad
