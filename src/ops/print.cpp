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

std::string format_float(double v, bool scientific) {
  std::ostringstream out;
  if (std::isnan(v)) {
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

// Every element as text, in logical (row-major) order. Integers are printed from int64, so large
// values stay exact.
std::vector<std::string> element_strings(const Tensor& t) {
  std::vector<std::string> items;
  if (t.dtype() == kBool) {
    for (int64_t v : t.to(kInt64).tolist<int64_t>()) items.push_back(v ? "true" : "false");
  } else if (!t.is_floating_point()) {
    for (int64_t v : t.tolist<int64_t>()) items.push_back(std::to_string(v));
  } else {
    std::vector<double> values = t.tolist<double>();
    // PyTorch's rule: scientific when magnitudes span more than 1000x, or are very large or small.
    double max_abs = 0, min_abs = INFINITY;
    for (double v : values)
      if (std::isfinite(v) && v != 0) {
        max_abs = std::max(max_abs, std::fabs(v));
        min_abs = std::min(min_abs, std::fabs(v));
      }
    bool scientific = max_abs > 0 && (max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4);
    for (double v : values) items.push_back(format_float(v, scientific));
  }
  return items;
}

bool shown(int64_t i, int64_t n, bool summarise) {
  return !summarise || n <= 2 * kEdgeItems || i < kEdgeItems || i >= n - kEdgeItems;
}

void print_dim(std::ostringstream& out, const std::vector<std::string>& items, const Shape& sizes, const Shape& strides,
               size_t dim, int64_t offset, size_t width, bool summarise, int indent) {
  if (dim == sizes.size()) {
    const std::string& s = items[static_cast<size_t>(offset)];
    out << std::string(width > s.size() ? width - s.size() : 0, ' ') << s;
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
    print_dim(out, items, sizes, strides, dim + 1, offset + i * strides[dim], width, summarise, indent + 1);
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
  std::vector<std::string> items = element_strings(*this);
  size_t width = 1;
  for (const std::string& item : items) width = std::max(width, item.size());
  std::ostringstream out;
  out << "tensor(";
  if (numel() == 0) {
    out << "[]";
  } else {
    print_dim(out, items, sizes(), contiguous_strides(sizes()), 0, 0, width, numel() > kSummariseAbove, 7);
  }
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

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << tensor.str();
}

}  // namespace tapegrad
